"""Load a ``configs/slm_*.yaml`` file through Hydra's compose API, with ``key=value`` overrides.

Hydra gives the defaults list (the offline preset only lists what differs from the GPT-2 config),
the override grammar and struct mode (a typo'd key is an error). On top, every override must keep
the type of the value it replaces, like nanoGPT's configurator: ``train.epochs=five`` is refused.
"""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException
from omegaconf import DictConfig, ListConfig, OmegaConf

from duet.foundation import CONFIG_DIR, PROJECT_DIR, SAMPLES_DIR
from slm.errors import SlmError

DEFAULT_CONFIG = "slm_gpt2_alpaca"
OFFLINE_CONFIG = "slm_tiny_offline"


class ConfigError(SlmError, ValueError):
    """A user mistake in the config name or an override; the message is one line."""


def load_config(config_name: str = DEFAULT_CONFIG, overrides: list[str] | None = None) -> DictConfig:
    overrides = list(overrides or [])
    for override in overrides:
        if override.startswith("+") or "=" not in override:
            raise ConfigError(f"bad override '{override}': use key=value with a key that exists in the config")
    if not (CONFIG_DIR / f"{config_name}.yaml").is_file():
        raise ConfigError(f"no config '{config_name}' in {CONFIG_DIR} (try {DEFAULT_CONFIG} or {OFFLINE_CONFIG})")
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        try:
            base = compose(config_name=config_name)
            cfg = compose(config_name=config_name, overrides=overrides)
        except HydraException as e:
            first_line = str(e).splitlines()[0]
            if e.__cause__ is not None and "not in struct" in str(e.__cause__):
                first_line += " " + str(e.__cause__).splitlines()[0].replace("not in struct", "unknown")
            raise ConfigError(first_line) from None
    _check_types(base, cfg, "")
    floor = OmegaConf.select(cfg, "answer.min_token_prob")
    if "answer" in cfg and (floor is None or not 0 <= floor <= 1):  # caught here, not when the trained model loads
        raise ConfigError(f"answer.min_token_prob must be in [0, 1] (0 = off), got {floor!r}")
    OmegaConf.set_struct(cfg, True)
    return cfg


def _check_types(base, new, prefix: str) -> None:
    """Refuse an override whose type differs from the default's (ints may become floats, null is free)."""
    for key in base:
        path = f"{prefix}{key}"
        old, value = base[key], new[key]
        if isinstance(old, DictConfig):
            _check_types(old, value, path + ".")
        elif old is None or value is None:
            continue
        elif isinstance(old, ListConfig) != isinstance(value, ListConfig):
            raise ConfigError(f"{path}: expected a list like {OmegaConf.to_container(old)}, got {value!r}")
        elif isinstance(old, bool) != isinstance(value, bool):
            raise ConfigError(f"{path}: expected true/false, got {value!r}")
        elif isinstance(old, (int, float)) and not isinstance(value, (int, float)):
            raise ConfigError(f"{path}: expected a number, got {value!r}")
        elif isinstance(old, int) and not isinstance(old, bool) and isinstance(value, float) and not float(value).is_integer():
            raise ConfigError(f"{path}: expected an integer, got {value!r}")
        elif isinstance(old, str) and not isinstance(value, str):
            raise ConfigError(f"{path}: expected a string, got {value!r}")


def resolve_path(path: str) -> Path:
    """Relative data/output paths in configs are relative to the project folder (``duet.foundation.PROJECT_DIR``:
    the checkout), not the cwd; one under ``samples/`` that the project folder lacks (duet installed) is the bundled
    sample's."""
    candidate = Path(path).expanduser()
    if candidate.is_absolute():
        return candidate
    if candidate.parts[:1] == ("samples",) and not (PROJECT_DIR / candidate).exists():
        return SAMPLES_DIR.joinpath(*candidate.parts[1:])
    return PROJECT_DIR / candidate


def partial_dir(final_dir: Path) -> Path:
    """Where a run works until it has finished: fixed per output folder, so a re-run finds it (and ``tools/demo.py``
    can clear it when the run's settings changed)."""
    return final_dir.parent / f".{final_dir.name}.partial"
