# FusedLSTM's CUDA kernels, compiled into the same library as the CPU kernel (included from the
# top-level CMakeLists.txt once CUDA is enabled). docs/architecture_cxx.md describes the tree.
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
set(_cuda_dir ${CMAKE_CURRENT_SOURCE_DIR}/custom_ops/cuda)
target_sources(lstm_ort_ops PRIVATE
  # the op and the Python tools' entry points
  ${_cuda_dir}/cuda_ops.cc
  ${_cuda_dir}/entry_points.cc
  # one call: orchestration, plans, scratch, heuristics, device limits
  ${_cuda_dir}/stack_run.cu
  ${_cuda_dir}/stack_plan.cc
  ${_cuda_dir}/scratch_layout.cc
  ${_cuda_dir}/heuristics.cc
  ${_cuda_dir}/device_limits.cc
  ${_cuda_dir}/developer_knobs.cc
  # strategies and the input projection
  ${_cuda_dir}/v1/launch_tiled.cu
  ${_cuda_dir}/v1/launch_splitk.cu
  ${_cuda_dir}/persistent/plan.cc
  ${_cuda_dir}/persistent/launch.cu
  ${_cuda_dir}/gemm/input_projection.cu
  ${_cuda_dir}/gemm/cublas_handles.cc)
set_target_properties(lstm_ort_ops PROPERTIES CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}")
target_compile_definitions(lstm_ort_ops PRIVATE LSTM_ORT_WITH_CUDA)
target_compile_options(lstm_ort_ops PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-lineinfo -Xptxas=-v>)
target_link_libraries(lstm_ort_ops PRIVATE CUDA::cudart CUDA::cublas)
message(STATUS "lstm_ort: building CUDA kernels for sm_${CMAKE_CUDA_ARCHITECTURES}")
