"""Where ``tools/demo.py`` writes the models it trains: the models ``tools/pipeline.py`` and ``tools/serve.py``
answer with unless told otherwise. Its own module, so that inference reads these two paths without loading the
demo's stages (``duet.demo``) and the synthesis package they import."""

from duet.foundation import EXPERIMENTS

DEMO_ASR_MODEL = EXPERIMENTS / "demo_asr" / "demo_asr.nemo"
DEMO_SLM_MODEL = EXPERIMENTS / "demo_slm"
