"""The release number, in a module of its own: the linter reads it without loading the package's
`__init__`, whose lazy names lead to the verifier and torch."""

__version__ = "0.1.0"
