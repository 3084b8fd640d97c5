# FusedLSTM's CUDA kernels, compiled into the same library as the CPU kernel (included from the
# top-level CMakeLists.txt once CUDA is enabled).
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
set(_cuda_dir ${CMAKE_CURRENT_SOURCE_DIR}/custom_ops/cuda)
target_sources(lstm_ort_ops PRIVATE ${_cuda_dir}/cuda_ops.cc ${_cuda_dir}/cublas_handles.cc ${_cuda_dir}/lstm_cuda.cu
                                     ${_cuda_dir}/persistent_plan.cc)
set_target_properties(lstm_ort_ops PROPERTIES CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}")
target_compile_definitions(lstm_ort_ops PRIVATE LSTM_ORT_WITH_CUDA)
target_compile_options(lstm_ort_ops PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-lineinfo -Xptxas=-v>)
target_link_libraries(lstm_ort_ops PRIVATE CUDA::cudart CUDA::cublas)
message(STATUS "lstm_ort: building CUDA kernels for sm_${CMAKE_CUDA_ARCHITECTURES}")
