// The onnxruntime C++ API as this library uses it: initialised by hand in RegisterCustomOps,
// against API version LSTM_ORT_API_VERSION so one build loads in every later onnxruntime.
#pragma once

#ifndef ORT_API_MANUAL_INIT
#define ORT_API_MANUAL_INIT
#endif
#include <onnxruntime_cxx_api.h>
