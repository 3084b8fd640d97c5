# FusedLSTM's CUDA kernels: the plugin library liblstm_ort_cuda.so, loaded by the core library
# (lstm_ort_ops) when it can be (custom_ops/cuda_plugin.h). Included from the top-level
# CMakeLists.txt once CUDA is enabled. docs/architecture.md describes the tree.
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
set(_cuda_dir ${CMAKE_CURRENT_SOURCE_DIR}/custom_ops/cuda)
add_library(lstm_ort_cuda SHARED
  # the plugin's registration function, the op and the Python tools' entry points
  ${_cuda_dir}/plugin_entry.cc
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
  ${_cuda_dir}/v1/gemm_step.cu
  ${_cuda_dir}/v1/step_graphs.cc
  ${_cuda_dir}/persistent/plan.cc
  ${_cuda_dir}/persistent/mma_plan.cc
  ${_cuda_dir}/persistent/launch.cu
  ${_cuda_dir}/cluster/plan.cc
  ${_cuda_dir}/cluster/launch.cu
  ${_cuda_dir}/gemm/input_projection.cu
  ${_cuda_dir}/gemm/kept_split.cc
  ${_cuda_dir}/gemm/cublas_handles.cc
  ${_cuda_dir}/gemm/step_gemm.cc
  # factored weights (optimize --low-rank): their own path, chosen by the op
  ${_cuda_dir}/low_rank/run.cu
  ${_cuda_dir}/low_rank/gemm.cc
  ${_cuda_dir}/low_rank/scratch.cc
  ${_cuda_dir}/low_rank/recurrence_plan.cc
  $<TARGET_OBJECTS:lstm_ort_common>)
target_include_directories(lstm_ort_cuda PRIVATE custom_ops/include custom_ops)
target_include_directories(lstm_ort_cuda SYSTEM PRIVATE "${ORT_INCLUDE_DIR}")
target_compile_definitions(lstm_ort_cuda PRIVATE ORT_API_MANUAL_INIT LSTM_ORT_API_VERSION=21 LSTM_ORT_WITH_CUDA)
set_target_properties(lstm_ort_cuda PROPERTIES
  CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}"
  CXX_VISIBILITY_PRESET hidden CUDA_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
  # Installed (the wheel), it finds the CUDA runtime and cuBLAS of the pip packages that
  # onnxruntime-gpu's extras install into the same site-packages (site-packages/nvidia/cu13/lib),
  # as torch does; Python preloads them too (onnxruntime.preload_dlls). A system toolkit on the
  # loader's path serves as well.
  INSTALL_RPATH "${LSTM_ORT_CUDA_RPATH}")
target_compile_options(lstm_ort_cuda PRIVATE
  $<$<COMPILE_LANGUAGE:CXX>:-O3 -Wall -Wextra -Wno-unused-parameter -Wno-maybe-uninitialized>
  $<$<COMPILE_LANGUAGE:CUDA>:-lineinfo -Xptxas=-v>)
target_link_options(lstm_ort_cuda PRIVATE -Wl,--no-undefined)
target_link_libraries(lstm_ort_cuda PRIVATE CUDA::cudart CUDA::cublas CUDA::cublasLt)
message(STATUS "lstm_ort: building the CUDA plugin for ${CMAKE_CUDA_ARCHITECTURES}")
