"""Multi-GPU layer pipelining of a FusedLSTM stack (docs/pipeline.md).

``PipelineSession(model, devices=(0, 1))`` splits the stack by layer ranges, one onnxruntime
session per stage on its GPU, and runs each call's micro-batches / time chunks through the stages
with cuda-python streams, events and peer copies. cuda-python is imported only when a session is
made on GPUs, so this package imports without it.
"""

from lstm_ort.pipeline.schedule import CostModel, Plan
from lstm_ort.pipeline.session import PipelineSession
from lstm_ort.pipeline.unsupported import Unsupported

__all__ = ["CostModel", "PipelineSession", "Plan", "Unsupported"]
