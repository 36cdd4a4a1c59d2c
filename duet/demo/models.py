"""Where ``tools/demo.py`` writes the models it trains: the models ``tools/pipeline.py`` and ``tools/serve.py``
answer with unless told otherwise (the language model: the Whisper-start preset's when it has been trained). Its own
module, so that inference reads these paths without loading the demo's stages (``duet.demo.stages``) and the synthesis
package they import."""

from pathlib import Path

from duet.foundation import EXPERIMENTS

DEMO_ASR_MODEL = EXPERIMENTS / "demo_asr" / "demo_asr.nemo"
DEMO_SLM_MODEL = EXPERIMENTS / "demo_slm"
#: What ``python slm/finetune.py --config-name slm_whisper_offline`` writes (that config's output_dir): the language
#: model fine-tuned from Whisper tiny.en's text decoder. The demo trains the same start with its own preset
#: (configs/slm_whisper_demo.yaml) into :data:`DEMO_SLM_MODEL`. It is 106 MB of fp32, so the repository does not
#: bundle it.
WHISPER_SLM_MODEL = EXPERIMENTS / "slm_whisper"


def default_slm_model() -> Path:
    """The language model the pipeline and the server answer with unless given one: the Whisper-start preset's once
    it has been trained (its folder holds a finished run's config.json), else the demo's."""
    return WHISPER_SLM_MODEL if (WHISPER_SLM_MODEL / "config.json").is_file() else DEMO_SLM_MODEL
