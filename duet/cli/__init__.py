"""Command-line glue shared by the entry scripts: the flags every tool takes, and the model's ``decoding.json`` and
other options read into typed settings at the boundary."""
