"""Fast tests of the demo's machinery (duet/demo/stages.py): stage skipping/restarting and the pipeline's answer scores."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace

import pytest

import duet.demo.stages as demo
from duet.demo.stages import Stage
from duet.foundation import python_command
from slm.config import partial_dir
from tests.script_helpers import load_script


@pytest.fixture(autouse=True)
def stage_logs_in_tmp(tmp_path, monkeypatch):
    """Stage logs go to experiments/<stage>/log.txt: keep these tests' logs out of the repository's folder."""
    monkeypatch.setattr(demo, "EXPERIMENTS", tmp_path / "experiments")


def _stage(tmp_path, run_dir, marker: str) -> Stage:
    out = tmp_path / "out.txt"
    code = f"open({str(out)!r}, 'w').write({marker!r})"
    return Stage("t", [sys.executable, "-c", code], lambda: "", inputs=[tmp_path / "in.txt"], outputs=[out],
                 run_dir=run_dir)


def test_run_dir_is_kept_for_a_resume_and_cleared_when_inputs_change(tmp_path, monkeypatch):
    monkeypatch.setattr(demo, "STAMP_DIR", tmp_path / "stamps")
    (tmp_path / "in.txt").write_text("v1")
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    stage = _stage(tmp_path, run_dir, "a")
    assert stage.run() == 0 and not run_dir.exists()  # a folder of unknown origin: not resumed
    (run_dir / "checkpoints").mkdir(parents=True)  # as if the command had started a run and been killed
    assert stage.run() == 0 and run_dir.exists()  # same command and inputs: kept, so the run resumes
    assert stage.up_to_date()
    (tmp_path / "in.txt").write_text("v2 with other content")  # e.g. a new base checkpoint
    assert not stage.up_to_date()
    assert stage.run() == 0 and not run_dir.exists()


def test_demo_scores_answers_against_what_was_said():
    from duet.demo.stages import answer_scores, reference_answers

    references = reference_answers()
    assert len(references) > 10  # the sample's test-clean requests whose template has a computed answer
    said = dict(list(references.items())[:4])
    texts = {f"f{i}.flac": text for i, text in enumerate(said)}
    perfect = [{"file": f, "response": references[t]} for f, t in texts.items()]
    assert answer_scores(perfect, texts)["assistant_on_topic"] == 100.0
    wrong = [{"file": f, "response": "Playing music."} for f in texts]
    scores = answer_scores(wrong, texts)
    assert scores["assistant_rows"] == 4 and scores["assistant_on_topic"] == 0.0
    assert answer_scores([{"file": "x.flac", "response": "hi"}], {"x.flac": "not a sample request"})["assistant_rows"] == 0


def test_a_changed_command_or_a_missing_output_reruns_the_stage(tmp_path, monkeypatch):
    monkeypatch.setattr(demo, "STAMP_DIR", tmp_path / "stamps")
    (tmp_path / "in.txt").write_text("v1")
    assert _stage(tmp_path, None, "a").run() == 0
    assert _stage(tmp_path, None, "a").up_to_date()
    assert not _stage(tmp_path, None, "b").up_to_date()  # e.g. another lr or epoch count
    (tmp_path / "out.txt").unlink()
    assert not _stage(tmp_path, None, "a").up_to_date()


def test_demo_runs_the_stages_asked_for(repo_root, capsys):
    cli = load_script(repo_root / "tools" / "demo.py", "demo_cli")
    names = [stage.name for stage in cli.stages()]

    def listed(*argv):
        assert cli.main(["--list", *argv]) == 0
        return [line.split()[0] for line in capsys.readouterr().out.splitlines()]

    assert listed() == names and names[0] == "manifests" and names[-2:] == ["joint-base", "joint"]
    assert listed("--from", "slm") == names[names.index("slm"):]
    assert listed("--only", "lm", "asr") == ["lm", "asr"]
    with pytest.raises(SystemExit):  # one or the other
        cli.main(["--list", "--from", "slm", "--only", "asr"])


def test_the_joint_stages_score_the_base_and_the_fine_tune_as_the_pipeline_decodes(repo_root):
    """The sample's held-out voices under the decoding the pipeline stage writes into decoding.json: the two stages'
    commands read back as that very decoding, and differ only in the model and where the report goes."""
    from duet.cli.cli_args import decoding_settings_from_args
    from duet.demo.stages import demo_decoding

    cli = load_script(repo_root / "tools" / "demo.py", "demo_cli")
    by_name = {stage.name: stage.command for stage in cli.stages()}
    base, tuned = by_name["joint-base"], by_name["joint"]
    assert base[1:5] == ["bench/asr_generalisation.py", "--no-real", "--sets", "sample test-clean"]
    # read by the bench's own parser, as the stage's process reads them
    parser = load_script(repo_root / "bench" / "asr_generalisation.py", "generalisation_bench").get_parser()
    read = [parser.parse_args(command[2:]) for command in (base, tuned)]
    assert all(args.sets == ["sample test-clean"] and args.no_real for args in read)
    assert [decoding_settings_from_args(args) for args in read] == [demo_decoding()] * 2
    assert [str(args.model) for args in read] == [str(cli.BASE_CHECKPOINT), str(demo.DEMO_ASR_MODEL)]
    assert read[0].out_dir != read[1].out_dir
    # --list shows the set's name quoted: the line typed in a shell runs the same command
    shown = next(stage for stage in cli.stages() if stage.name == "joint").shown()
    assert "--sets 'sample test-clean' --decoding=joint" in shown


def listed_commands(cli, capsys, *argv) -> dict[str, str]:
    """Stage name -> the command ``tools/demo.py --list *argv`` shows for it."""
    assert cli.main(["--list", *argv]) == 0
    return dict(line.split(maxsplit=1) for line in capsys.readouterr().out.splitlines())


def test_asr_epochs_replaces_only_the_fine_tunes_passes(repo_root, capsys):
    """--asr-epochs N: a quicker demo (the slow tier's), every other stage and setting as the demo's own."""
    cli = load_script(repo_root / "tools" / "demo.py", "demo_cli")
    own, shorter = listed_commands(cli, capsys), listed_commands(cli, capsys, "--asr-epochs", "1")
    assert {name for name in own if own[name] != shorter[name]} == {"asr"}
    epochs = next(arg for arg in own["asr"].split() if arg.startswith("trainer.max_epochs="))
    assert shorter["asr"] == own["asr"].replace(epochs, "trainer.max_epochs=1")
    with pytest.raises(SystemExit):
        cli.main(["--asr-epochs", "0"])
    assert "--asr-epochs must be at least 1, got 0" in capsys.readouterr().err


def test_slm_steps_replaces_only_the_slms_steps(repo_root, capsys):
    """--slm-steps N: the SLM's config's train.max_steps overridden, every other stage as the demo's own."""
    cli = load_script(repo_root / "tools" / "demo.py", "demo_cli")
    own, shorter = listed_commands(cli, capsys), listed_commands(cli, capsys, "--slm-steps", "40", "--asr-epochs", "1")
    assert {name for name in own if own[name] != shorter[name]} == {"asr", "slm"}
    assert shorter["slm"] == own["slm"] + " train.max_steps=40"
    # a run stopped part way at other steps is not resumed: its .partial folder goes when the command changed
    slm = next(stage for stage in cli.stages(slm_steps=40) if stage.name == "slm")
    assert slm.run_dir == partial_dir(cli.DEMO_SLM_MODEL)
    with pytest.raises(SystemExit):
        cli.main(["--slm-steps", "0"])
    assert "--slm-steps must be at least 1, got 0" in capsys.readouterr().err


def test_the_fine_tune_mixes_in_the_bases_pool_and_its_real_speech_where_that_exists(repo_root, tmp_path,
                                                                                   monkeypatch):
    cli = load_script(repo_root / "tools" / "demo.py", "demo_cli")
    for real_root, mixes in ((tmp_path, [cli.POOL_MIX, cli.REAL_MIX]), (tmp_path / "missing", [cli.POOL_MIX])):
        monkeypatch.setattr(cli, "REAL_SPEECH", real_root)
        stages = {stage.name: stage for stage in cli.stages()}
        assert ("realmix" in stages) == real_root.is_dir()
        assert stages["pool"].outputs[0].parent == stages["poolmix"].inputs[0] == cli.POOL
        asr = stages["asr"]
        train = next(arg for arg in asr.command if arg.startswith("model.train_ds.manifest_filepath="))
        assert train.split("=", 1)[1].strip("'").split(",") == [str(cli.MANIFESTS["train-clean"])] + \
            [str(m) for m in mixes]
        assert set(mixes) <= set(asr.inputs)  # a new pool or real mix trains the model again
        # about the same number of steps either way: fewer passes over the sample when the real mix is there
        kind = "with real mix" if real_root.is_dir() else "without"
        fine_tune = cli.ASR_FINE_TUNE[kind]
        assert {f"trainer.max_epochs={fine_tune.epochs}", f"model.optim.lr={fine_tune.head_lr}",
                f"encoder_finetune.lr_scale={fine_tune.encoder_lr_scale}"} <= set(asr.command)
    with_real, without = cli.ASR_FINE_TUNE["with real mix"], cli.ASR_FINE_TUNE["without"]
    assert with_real.epochs < without.epochs
    # without the real speech in the batches, the head and Whisper's weights move slower: other voices are forgotten
    # faster
    assert without.encoder_lr_scale < with_real.encoder_lr_scale and without.head_lr < with_real.head_lr


def test_the_lms_text_holds_the_real_transcripts_outside_the_tuning_speakers_where_they_exist(repo_root, tmp_path,
                                                                                            monkeypatch):
    cli = load_script(repo_root / "tools" / "demo.py", "demo_cli")
    for real_root in (tmp_path, tmp_path / "missing"):
        monkeypatch.setattr(cli, "REAL_SPEECH", real_root)
        stages = {stage.name: stage for stage in cli.stages()}
        lmtext = stages["lmtext"].command
        assert ("realtext" in stages) == ("--manifest" in lmtext) == real_root.is_dir()
        if real_root.is_dir():
            realtext = stages["realtext"].command
            # the speakers the pipeline's weights are chosen on stay out of the LM's text
            assert realtext[realtext.index("--dev-speakers") + 1] == str(cli.REAL_TEXT_DEV_SPEAKERS)
            assert lmtext[lmtext.index("--manifest") + 1] == str(cli.REAL_TEXT)
            assert lmtext[lmtext.index("--exclude") + 1] == str(cli.REAL_TEXT_DEV)
            assert {cli.REAL_TEXT, cli.REAL_TEXT_DEV} <= set(stages["lmtext"].inputs)  # new transcripts, new LM
            assert list(stages).index("realtext") < list(stages).index("lmtext")


def test_generalisation_summary_flags_a_real_set_made_worse(tmp_path):
    from duet.demo.stages import generalisation_summary

    def report(name, rows):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"rows": [{"set": s, "distance": d, "utterances": 10, "wer": w}
                                             for s, d, w in rows]}))
        return path

    base = report("base", [("sample test-clean", "synthetic", 0.80), ("read_sentences", "real human speech", 0.70),
                           ("digits", "real human speech", 0.50)])
    demo = report("demo", [("sample test-clean", "synthetic", 0.40), ("read_sentences", "real human speech", 0.71),
                           ("digits", "real human speech", 0.60)])
    lines = generalisation_summary(base, demo).splitlines()
    assert "80.00% ->  40.00% (-40.00)" in lines[1] and "<<" not in lines[1]  # the target domain may improve
    assert "<<" not in lines[2]  # one point worse on a real set is within the tolerance
    assert lines[3].endswith("<< worse by more than 2 points")
    synthetic_only = report("demo2", [("sample test-clean", "synthetic", 0.40)])
    assert "no real-speech set" in generalisation_summary(base, synthetic_only)


def test_the_pipeline_stage_decodes_as_the_decoding_json_it_writes(repo_root, tmp_path, monkeypatch):
    from duet.asr.decoding.file import read_decoding_file

    cli = load_script(repo_root / "tools" / "demo.py", "demo_cli")
    stage = next(s for s in cli.stages() if s.name == "pipeline")
    assert not {"--asr-decoding", "--lm", "--beam-size"} & set(stage.command)  # tools/pipeline.py reads the file
    assert demo.DEMO_DECODING in stage.outputs and stage.settings["asr_decoding"]["strategy"] == "joint"
    lm = tmp_path / "demo_lm" / "token.arpa"
    lm.parent.mkdir()
    lm.write_text("\\data\\\n")
    monkeypatch.setattr(demo, "DEMO_LM", lm)
    monkeypatch.setattr(demo, "DEMO_DECODING", tmp_path / "demo_asr" / "decoding.json")
    demo.write_demo_decoding()
    assert read_decoding_file(demo.DEMO_DECODING).settings == replace(demo.demo_decoding(), ngram_lm=str(
        demo.DEMO_DECODING.parent / "../demo_lm/token.arpa"))
    # the threshold chosen for this model and decoding goes with it (tools/pipeline.py uses it with the file)
    assert read_decoding_file(demo.DEMO_DECODING).min_confidence == demo.DEMO_MIN_CONFIDENCE
    stage.inputs = []  # the demo's models need not exist here
    fingerprint = stage.fingerprint()
    stage.settings["asr_decoding"]["beam_size"] += 1  # e.g. a newly tuned width: the stage reruns
    assert stage.fingerprint() != fingerprint
    fingerprint = stage.fingerprint()
    stage.settings["min_confidence"] += 0.05  # a newly chosen threshold: it reruns too
    assert stage.fingerprint() != fingerprint


@pytest.fixture
def demo_with_stages(repo_root, tmp_path, monkeypatch):
    """tools/demo.py with its stages replaced by ``stages`` (set by the test) and its outputs in tmp_path."""
    cli = load_script(repo_root / "tools" / "demo.py", "demo_cli")
    monkeypatch.setattr(demo, "EXPERIMENTS", tmp_path / "experiments")
    monkeypatch.setattr(demo, "STAMP_DIR", tmp_path / "experiments" / ".demo_stamps")
    stages = []
    monkeypatch.setattr(cli, "stages", lambda: stages)
    return cli, stages


CHATTY = ("import sys\n"
          "for i in range(30):\n"
          "    print(f'[NeMo I] log line {i}')\n"
          "    print(f'warning {i}', file=sys.stderr)\n"
          "sys.exit(int(sys.argv[1]))\n")


def test_a_stages_output_goes_to_its_log_not_the_console(demo_with_stages, tmp_path, capfd):
    cli, stages = demo_with_stages
    answers = tmp_path / "answers.jsonl"
    stages += [Stage("chatty", [sys.executable, "-c", CHATTY, "0"], lambda: "chatty summary"),
               Stage("answers", [sys.executable, "-c", "import sys; print('{}'); print('noise', file=sys.stderr)"],
                     lambda: "answers summary", stdout_to=answers)]
    assert cli.main([]) == 0
    out, err = capfd.readouterr()
    console = out + err  # at the descriptors: what the child itself wrote (the header shows its code)
    assert "log line 0" not in console and "warning 29" not in console and "\nnoise\n" not in console
    assert "chatty summary" in out and "answers summary" in out and "demo: 2 stage(s) done" in out
    log = (tmp_path / "experiments" / "chatty" / "log.txt").read_text()
    assert "[NeMo I] log line 29" in log and "warning 29" in log and log.startswith(f"$ {python_command('-c')}")
    assert answers.read_text() == "{}\n"  # the stage's output file gets its standard output alone, as before
    assert "noise" in (tmp_path / "experiments" / "answers" / "log.txt").read_text()


def test_verbose_shows_a_stages_output_live_and_still_logs_it(demo_with_stages, tmp_path, capfd):
    cli, stages = demo_with_stages
    stages.append(Stage("chatty", [sys.executable, "-c", CHATTY, "0"], lambda: "chatty summary"))
    assert cli.main(["--verbose"]) == 0
    out, err = capfd.readouterr()
    assert "[NeMo I] log line 29" in out and "warning 29" in err
    assert "warning 29" in (tmp_path / "experiments" / "chatty" / "log.txt").read_text()


def test_a_failing_stage_prints_the_end_of_its_log_and_where_it_is(demo_with_stages, tmp_path, capfd):
    cli, stages = demo_with_stages
    stages += [Stage("broken", [sys.executable, "-c", CHATTY, "3"], lambda: "never"),
               Stage("after", [sys.executable, "-c", "print('should not run')"], lambda: "never")]
    assert cli.main([]) == 3
    out, err = capfd.readouterr()
    tail = err[err.index("--- last lines of"):err.index("\n---\n")].splitlines()[1:]
    assert len(tail) == 20 and tail[-1] == "warning 29" and "log line 29" in err and "log line 10\n" not in err
    assert "broken/log.txt" in err and f"resume with {python_command('tools/demo.py', '--from', 'broken')}\n" in err
    assert "should not run" not in out and not (tmp_path / "experiments" / "after").exists()


def test_a_background_stage_runs_beside_the_stages_before_it(demo_with_stages, tmp_path, capfd):
    """The first stage waits for a file that only the (later) background stage writes: run one after the other,
    the first would give up and fail."""
    cli, stages = demo_with_stages
    flag = tmp_path / "written_by_the_background_stage"
    waits = ("import pathlib, sys, time\n"
             f"flag = pathlib.Path({str(flag)!r})\n"
             "for _ in range(300):\n"
             "    if flag.exists(): sys.exit(0)\n"
             "    time.sleep(0.1)\n"
             "sys.exit(5)\n")
    stages += [Stage("first", [sys.executable, "-c", waits], lambda: "first summary"),
               Stage("beside", [sys.executable, "-c", f"open({str(flag)!r}, 'w').write('x')"], lambda: "beside summary",
                     background=True)]
    assert cli.main([]) == 0
    out, _ = capfd.readouterr()
    assert out.index("beside: started beside the stages before it") < out.index("=== first")
    assert "first summary" in out and "beside summary" in out and "demo: 2 stage(s) done" in out
    summary = out[out.index("=== summary"):].splitlines()
    assert [line.split()[0] for line in summary[1:3]] == ["first", "beside"]  # rows in the list's order


def test_a_stage_beside_a_background_one_gets_the_cores_it_leaves(demo_with_stages, tmp_path, monkeypatch):
    cli, stages = demo_with_stages
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(demo, "usable_cores", lambda: 4)
    seen, done = tmp_path / "threads.txt", tmp_path / "done"
    # the background stage runs until the last stage before it has recorded what it saw
    waits = (f"import pathlib, time\nfor _ in range(600):\n    if pathlib.Path({str(done)!r}).exists(): break\n"
             "    time.sleep(0.1)\n")
    stages += [Stage("first", [sys.executable, "-c", f"import os; open({str(seen)!r}, 'w').write("
                                                     f"os.environ.get('OMP_NUM_THREADS', 'unset'))"], lambda: ""),
               Stage("later", [sys.executable, "-c", f"import os; open({str(seen)!r}, 'a').write("
                                                     f"' ' + os.environ.get('OMP_NUM_THREADS', 'unset')); "
                                                     f"open({str(done)!r}, 'w')"], lambda: ""),
               Stage("beside", [sys.executable, "-c", waits], lambda: "", background=True)]
    assert cli.main([]) == 0
    assert seen.read_text() == "3 3"  # 4 cores, one thread for the stage beside them
    stages.pop()  # without a background stage, nothing is set
    assert cli.main([]) == 0 and seen.read_text() == "unset unset"
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # the user's own setting wins
    assert demo.threads_beside([]) == {}


def test_only_in_another_order_runs_every_stage_in_turn(demo_with_stages, tmp_path, capfd):
    """A stage after the background one may read its outputs: asked for in another order, nothing runs beside."""
    cli, stages = demo_with_stages
    stages += [Stage("first", [sys.executable, "-c", "pass"], lambda: ""),
               Stage("beside", [sys.executable, "-c", "pass"], lambda: "", background=True)]
    assert cli.main(["--only", "beside", "first"]) == 0
    out, _ = capfd.readouterr()
    assert "started beside" not in out and out.index("=== beside") < out.index("=== first")


def test_a_failing_stage_stops_the_background_one(demo_with_stages, tmp_path, capfd):
    cli, stages = demo_with_stages
    stages += [Stage("broken", [sys.executable, "-c", "import sys; sys.exit(4)"], lambda: "never"),
               Stage("slow", [sys.executable, "-c", "import time; time.sleep(120)"], lambda: "never", background=True)]
    started = time.time()
    assert cli.main([]) == 4
    assert time.time() - started < 60  # not waiting out the background stage's two minutes
    _, err = capfd.readouterr()
    assert "stage 'broken' failed" in err and "'slow' failed" not in err


def test_the_pipeline_summary_highlights_answers_judged_correct_first_then_wrong_ones_labelled(tmp_path):
    """Examples are chosen by slm.metrics.check_answer, not by file order: the file's first answers here are wrong."""
    said = {"a.flac": "what is sixty four degrees celsius in fahrenheit",
            "b.flac": "set the thermostat to seventy seven degrees",
            "c.flac": "what is nine minus eight",
            "d.flac": "play some reggae music",
            "e.flac": "call grandma"}
    references = demo.reference_answers()
    assert set(said.values()) <= set(references), "the sample's test-clean requests changed: pick others"
    requests = tmp_path / "requests.json"
    requests.write_text("".join(json.dumps({"audio_filepath": f, "text": t, "duration": 2.0}) + "\n"
                                for f, t in {**said, "f.flac": "call grandpa"}.items()))
    rows = [
        {"file": "a.flac", "transcript": said["a.flac"],
         "response": "64 degrees Celsius is about -1 degrees Fahrenheit.", "confidence": 0.8, "understood": True},
        {"file": "b.flac", "transcript": "set the thermostat to seventy degrees",
         "response": "Setting the thermostat to 70 degrees.", "confidence": 0.7, "understood": True,
         "withheld": None},
        {"file": "c.flac", "transcript": said["c.flac"], "response": "9 minus 8 is 1.", "confidence": 0.9,
         "understood": True},
        {"file": "d.flac", "transcript": "play some rag music", "response": demo.NOT_UNDERSTOOD_REPLY,
         "confidence": 0.31, "understood": False},
        {"file": "e.flac", "transcript": said["e.flac"], "response": "Calling Grandma.", "confidence": 0.9,
         "understood": True},
        {"file": "f.flac", "transcript": "call grandpa", "response": "Sorry, I can't call grandpa.", "confidence": 0.9,
         "understood": True, "withheld": "Calling Chloe."},  # no reference answer: counted as withheld only
    ]
    answers = tmp_path / "answers.jsonl"
    answers.write_text("".join(json.dumps({**r, "error": None}) + "\n" for r in rows))
    lines = demo.pipeline_summary(answers, requests, right=3, wrong=3).splitlines()
    # 64 C in F worked out wrong is on topic but not correct: on topic 3 of 5, correct 2
    assert "1 not understood" in lines[0] and "; 1 answer(s) withheld" in lines[0]
    assert lines[1].endswith("right kind 80%, on topic (right kind + all slot words) 60%")
    assert lines[2].startswith("    correct (on topic, and any sum") and lines[2].endswith("check_answer): 2 of 5")
    assert lines[3] == "    well-formed (every word English, no loop: slm.metrics.well_formed): 100% of all 6 answers"
    examples = lines[4:]
    assert [line.split(":")[0].strip() for line in examples] == [
        "right", "right", "WRONG, works out 147.2 wrong", "WRONG, misses 77", "WRONG, not understood (confidence 0.31)"]
    assert "'9 minus 8 is 1.'" in examples[0] and "'Calling Grandma.'" in examples[1]
    assert "heard 'set the thermostat to seventy degrees'" in examples[3]
    none_right = tmp_path / "none.jsonl"
    none_right.write_text(json.dumps({**rows[0], "error": None}) + "\n")
    assert "    right: none of the 1" in demo.pipeline_summary(none_right, requests).splitlines()


def test_the_demo_ends_with_the_commands_that_answer_with_its_models(tmp_path, monkeypatch):
    requests = tmp_path / "requests.json"
    requests.write_text(json.dumps({"audio_filepath": str(tmp_path / "q.flac"), "text": "call grandma"}) + "\n")
    monkeypatch.setattr(demo, "DEMO_ASR_MODEL", tmp_path / "demo_asr" / "demo_asr.nemo")
    monkeypatch.setattr(demo, "DEMO_SLM_MODEL", tmp_path / "demo_slm")
    # the commands as typed in the shell that ran the demo (duet.foundation.python_command: python where that is it)
    assert demo.next_steps(requests).startswith(f"next: {python_command('tools/demo.py', '--from', 'asr')} (")
    demo.DEMO_ASR_MODEL.parent.mkdir()
    demo.DEMO_ASR_MODEL.write_bytes(b"x")
    demo.DEMO_SLM_MODEL.mkdir()
    (demo.DEMO_SLM_MODEL / "config.json").write_text("{}")
    models = f"--asr-model {demo.DEMO_ASR_MODEL} --slm-model {demo.DEMO_SLM_MODEL}"
    first, second = demo.next_steps(requests).splitlines()
    assert first == f"next: try {python_command('tools/pipeline.py', str(tmp_path / 'q.flac'), models)}"
    assert second.startswith(f"      or  {python_command('tools/serve.py', models)}   (then open http://127.0.0.1:8000")
