# FusedLSTM's CUDA kernels: the plugin library liblstm_ort_cuda.so, loaded by the core library
# (lstm_ort_ops) when it can be (custom_ops/cuda_plugin.h). Included from the top-level
# CMakeLists.txt once CUDA is enabled. docs/architecture.md describes the tree.
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
set(_cuda_dir ${CMAKE_CURRENT_SOURCE_DIR}/custom_ops/cuda)
include(${_cuda_dir}/plain_sources.cmake)
list(TRANSFORM LSTM_ORT_CUDA_PLAIN_SOURCES PREPEND ${_cuda_dir}/)
# Paths relative to custom_ops/cuda, by job.
set(_cuda_sources
  plugin_entry.cc cuda_ops.cc entry_points.cc  # registration, the op, the Python tools' entry points
  stack_run.cu device_limits.cc                # one call as its plan says; the device's limits
  launch_graphs.cc                             # whole short calls and v1's step loops as CUDA graphs
  v1/launch_tiled.cu v1/launch_splitk.cu v1/gemm_step.cu  # the backends
  persistent/launch.cu cluster/launch.cu mma_step/launch.cu
  low_rank/run.cu low_rank/gemm.cc             # factored weights (optimize --low-rank)
  gemm/input_projection.cu gemm/kept_split.cc gemm/cublas_handles.cc gemm/step_gemm.cc)  # cuBLAS
list(TRANSFORM _cuda_sources PREPEND ${_cuda_dir}/)
add_library(lstm_ort_cuda SHARED
  ${LSTM_ORT_CUDA_PLAIN_SOURCES}  # the call plan, planners, heuristics, scratch layouts (plain C++)
  ${_cuda_sources}
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
