"""The one error every part of the pipeline raises for a model it cannot split."""


class Unsupported(ValueError):
    """The model is not one a pipeline can split; the message says why."""
