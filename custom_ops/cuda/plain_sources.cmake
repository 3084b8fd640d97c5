# The CUDA plugin's plain-C++ host decisions (no CUDA runtime, no onnxruntime): the call plan and
# the planners, heuristics and scratch layouts it asks. Listed once: the plugin compiles them
# (sources.cmake), and the unit tests (custom_ops/tests) compile and test them without a GPU.
# Paths relative to custom_ops/cuda.
set(LSTM_ORT_CUDA_PLAIN_SOURCES
  call_plan.cc
  stack_plan.cc
  scratch_layout.cc
  heuristics.cc
  persistent/plan.cc
  persistent/mma_plan.cc
  cluster/plan.cc
  mma_step/plan.cc
  low_rank/scratch.cc
  low_rank/recurrence_plan.cc)
