"""The embedded default: ``tools/demo.py``'s stages (``stages``, which build the sample and so import synthesis),
where they write their models (``models``, light: inference reads it) and how far a running stage has got
(``progress``). Importing this package loads neither."""
