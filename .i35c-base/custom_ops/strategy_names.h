// Strategy <-> name, from one table: the `strategy` and `tuned` attributes, the LSTM_ORT_STRATEGY
// knob, their error messages and the Python tools (LstmOrtStrategyNames) all read it, so a new
// strategy is named in one place.
#pragma once

#include <string>

#include "lstm_ort/contract.h"

namespace lstm_ort {

// "auto", "tiled", "splitk", "persistent", "wavefront"; false for anything else.
bool ParseStrategy(const char* name, Strategy* out);

const char* StrategyName(Strategy strategy);

// Every name in enum order, joined by `separator`.
std::string StrategyNames(const char* separator);

// "auto, tiled, splitk, persistent or wavefront", for error messages.
std::string StrategyChoices();

}  // namespace lstm_ort
