"""DynaWeb trainer: TRL-based GSPO on dreamed and real web environments."""

__version__ = "0.1.0"
