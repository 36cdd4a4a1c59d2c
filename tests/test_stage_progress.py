"""duet/demo/progress.py: the demo's progress line for a long stage, read from the log its command writes."""

from __future__ import annotations

import io
import sys

import pytest

import duet.demo.stages as demo
import duet.demo.progress as stage_progress
from duet.demo.progress import ConsoleProgress, LogProgress
from duet.demo.stages import Stage
from duet.foundation.progress import duration
from tests.script_helpers import load_script


def lightning_bar(epoch: int, step: int, per_epoch: int) -> str:
    """Lightning's training bar as its TQDM callback draws it into a file: a carriage return, no newline."""
    percent = 100 * step // per_epoch
    return f"\rEpoch {epoch}: {percent:3d}%|█▌        | {step}/{per_epoch} [00:12<01:40, 0.54it/s, v_num=0_, " \
           "train_step_timing in s=0.0222]"


def test_the_training_bar_becomes_steps_of_the_whole_run_with_time_left_at_the_stages_own_pace(tmp_path):
    log = tmp_path / "log.txt"
    log.write_text("$ python nemo_recipes/finetune_ctc.py ...\n[NeMo I] Model restored\n")
    progress = LogProgress(log, epochs=6)
    assert progress.poll(now=0.0) is None and progress.describe(now=0.0) is None  # nothing to say yet
    with open(log, "a") as f:
        f.write(lightning_bar(1, 10, 99))  # epoch 2 of 6 (Lightning counts from 0), 109 steps done of 594
    assert progress.poll(now=100.0).what == "epoch 2/6, step 109/594"
    assert progress.describe(now=100.0) == "epoch 2/6, step 109/594 (18 %), time left: measuring the pace"
    with open(log, "a") as f:
        f.write("".join(lightning_bar(1, step, 99) for step in range(11, 60)))  # 49 steps in 98 s: 2 s a step
    assert progress.poll(now=198.0).done == 158
    assert progress.seconds_left(now=198.0) == pytest.approx((594 - 158) * 2.0)
    assert progress.describe(now=198.0) == "epoch 2/6, step 158/594 (27 %), about 15 min left"


def test_validation_and_the_end_of_training_are_named(tmp_path):
    log = tmp_path / "log.txt"
    log.write_text(lightning_bar(0, 4, 4)
                   + "\n\rValidation DataLoader 0:  50%|█████     | 1/2 [00:00<00:00, 42.71it/s]")
    progress = LogProgress(log, epochs=3)
    progress.poll(now=0.0)
    assert progress.describe(now=0.0).startswith("epoch 1/3, step 4/12 (33 %), validating")
    with open(log, "a") as f:
        f.write(lightning_bar(2, 4, 4) + "\n`Trainer.fit` stopped: `max_epochs=3` reached.\n")
    progress.poll(now=5.0)
    assert progress.describe(now=5.0) == "epoch 3/3, step 12/12 (100 %), training done: scoring the test set and saving"


def test_the_asr_recipes_own_progress_lines_count_with_their_epoch(tmp_path):
    """nemo_recipes/finetune_ctc.py prints its own progress lines (Lightning's bar goes to its library log)."""
    log = tmp_path / "log.txt"
    log.write_text("finetune_ctc: epoch 1/4, step 1/204 (0 %), loss 2.310, time left: measuring the pace\n")
    progress = LogProgress(log, epochs=4)
    assert progress.poll(now=0.0).what == "epoch 1/4, step 1/204"
    with open(log, "a") as f:
        f.write("finetune_ctc: validation at step 51: WER 41.20 %\n"
                "finetune_ctc: epoch 2/4, step 61/204 (30 %), loss 0.911, about 2 min left\n")
    assert progress.poll(now=60.0).done == 61
    assert progress.describe(now=60.0) == "epoch 2/4, step 61/204 (30 %), about 2 min left"  # 1 s a step
    with open(log, "a") as f:
        f.write("finetune_ctc: epoch 4/4, step 204/204 (100 %), loss 0.512, about 0 s left\n"
                "finetune_ctc: training done at step 204: saving the model and scoring the test set\n")
    progress.poll(now=200.0)
    assert progress.describe(now=200.0) == ("epoch 4/4, step 204/204 (100 %), training done: scoring the test set and "
                                            "saving")


def test_slm_step_lines_and_other_bars_count_too(tmp_path):
    log = tmp_path / "log.txt"
    log.write_text("[slm] step 40/2556  epoch 0.19  loss 5.1234  lr 1.00e-04  900 tok/s  35s\n")
    progress = LogProgress(log)
    assert progress.poll(now=0.0).what == "step 40/2556"
    other = tmp_path / "other.txt"
    other.write_text("\rTranscribing:  30%|███       | 3/10 [00:03<00:07, 1.00it/s]")
    assert LogProgress(other).poll(now=0.0).what == "Transcribing 3/10"


def test_a_log_started_afresh_is_read_from_its_start(tmp_path):
    log = tmp_path / "log.txt"
    log.write_text("x" * 1000 + "\n[slm] step 900/1000 \n")
    progress = LogProgress(log)
    assert progress.poll(now=0.0).done == 900
    log.write_text("[slm] step 3/1000 \n")  # the stage ran again: a new, shorter log
    assert progress.poll(now=1.0).done == 3


def test_duration_reads_like_a_time_left():
    assert [duration(s) for s in (4, 89, 240, 3900)] == ["4 s", "89 s", "4 min", "1 h 05 min"]


def test_off_a_terminal_a_progress_line_is_printed_every_interval(tmp_path):
    log = tmp_path / "log.txt"
    log.write_text(lightning_bar(0, 5, 10))
    out = io.StringIO()
    console = ConsoleProgress(LogProgress(log, epochs=2), out, terminal=False, every_s=30)
    for second in range(1, 95):
        console(float(second))
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and lines[0].startswith("  running 0:30: epoch 1/2, step 5/20 (25 %)")


def test_a_long_stage_shows_its_training_progress_on_the_demos_console(repo_root, tmp_path, monkeypatch, capfd):
    """The demo itself, its console not a terminal: a stage that trains (prints a Lightning bar to its log) gets
    lines that name its epoch and step while it runs."""
    cli = load_script(repo_root / "tools" / "demo.py", "demo_cli")
    monkeypatch.setattr(demo, "EXPERIMENTS", tmp_path / "experiments")
    monkeypatch.setattr(demo, "STAMP_DIR", tmp_path / "experiments" / ".demo_stamps")
    monkeypatch.setattr(stage_progress, "PLAIN_EVERY_S", 1.0)
    trainer = ("import sys, time\n"
               "for step in range(1, 9):\n"
               "    sys.stdout.write(f'\\rEpoch {(step - 1) // 4}: 50%|#    | {(step - 1) % 4 + 1}/4 [00:01<00:01]')\n"
               "    sys.stdout.flush()\n"
               "    time.sleep(0.5)\n")
    monkeypatch.setattr(cli, "stages", lambda: [Stage("train", [sys.executable, "-c", trainer], lambda: "trained",
                                                epochs=2)])
    assert cli.main([]) == 0
    out = capfd.readouterr().out
    assert "epoch 1/2, step " in out or "epoch 2/2, step " in out, out
    assert "/8 (" in out and "trained" in out
