// How many rows a padded call runs. onnxruntime's CUDA kernels set up again whenever an input's
// shape changes from one call to the next, even to a shape seen before (cuDNN's convolutions:
// ~18 ms a call of silero-vad on the H100 where the batch size changed from call to call, 0.7 ms
// where it did not), so a call is padded to a bucket and the group keeps the largest bucket of its
// last calls (Group::recent_buckets) while the load holds. Pure, unit-tested.
#pragma once

#include <algorithm>

namespace lstm_ort::streams {

// The bucket of a call of n steps: the smallest power of two >= n. Below pad_below (> 0: the batch
// size from which the model's kernels compute in another precision class, auto's TF32) the
// buckets end at pad_below - 1, so padding never moves a stream's result into that class, and a
// call of a size between the last power of two and pad_below still runs one shape (where calls of
// 129-255 steps below a bound of 256 ran unpadded, each size new: 12 ms calls of silero-vad on an
// H200 in an open loop of 1,000 streams, mean batch 215).
inline int BatchBucket(int n, int pad_below) {
  int bucket = 1;
  while (bucket < n) bucket *= 2;
  if (pad_below > 0 && n < pad_below && bucket >= pad_below) bucket = pad_below - 1;
  return bucket;
}

// The rows of a call of n steps (at most `limit`, never fewer than n): its bucket, or `held` (the
// largest bucket of the group's last calls) where larger, kept below pad_below where n is.
inline int PaddedRows(int n, int held, int pad_below, int limit) {
  int rows = std::max(BatchBucket(n, pad_below), held);
  if (pad_below > 0 && n < pad_below) rows = std::min(rows, pad_below - 1);
  return std::max(n, std::min(rows, limit));
}

// The most steps a call of a group takes (`limit`: max_batch and the group's own), where the
// precision bound lies within it. A call past the bound and one below it are two shapes, and on
// CUDA every change of shape from one call to the next costs more than any padding saves
// (silero-vad on an H200: 17 ms a call of step_batch alternating 255 and 256 streams, or 128 and
// 255; 0.75-1.08 ms a call of any one size from 64 to 512). So calls stay below the bound
// (pad_below - 1 steps at most) unless calls past it can be much larger (a limit of twice that at
// least) and either the group's recent calls went past it (`held`) or what is queued (`ready`)
// fills two calls below it. With max_batch = the bound (silero-vad's 256, the default), calls
// never take the last step that would cross it.
inline int CallLimit(int limit, int held, int pad_below, int ready) {
  if (pad_below <= 1 || limit < pad_below) return limit;
  const int below = pad_below - 1;
  if (limit < 2 * below) return below;
  return held >= pad_below || ready >= 2 * below ? limit : below;
}

}  // namespace lstm_ort::streams
