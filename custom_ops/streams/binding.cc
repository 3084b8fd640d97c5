// lstm_ort.serving.streams._engine: the native step path as Python sees it. The fast path of a
// step is all here: find the step's kind from its feeds' shapes (and the values of the inputs
// shared by a kind), copy its feeds, queue it and wait with the GIL released, and hand the
// outputs back as numpy arrays. Anything the fast path does not know
// (a first step of its kind, feeds to check in full) returns None, and Python's checks and
// analysis take over (lstm_ort/serving/streams/batcher.py), registering the kind for next time.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "element_types.h"
#include "engine.h"
#include "ort_device_runner.h"
#include "ort_runner.h"

namespace nb = nanobind;
using namespace lstm_ort::streams;

namespace {

// Buffers of one step's feeds, released when it goes.
struct Buffers {
  explicit Buffers(size_t n) : views(n) {}
  ~Buffers() {
    for (size_t k = 0; k < held; ++k) PyBuffer_Release(&views[k]);
  }
  std::vector<Py_buffer> views;
  size_t held = 0;
};

// Futures' steps finished on a thread that is inside one of the engine's short calls with the GIL
// released (a submitter that leads its own call, a close: PyEngine::RunReleased): kept here until
// that call holds the GIL again, instead of taking the GIL there and handing it back at once (two
// waits for the GIL a step, each a thread switch under load). Not in step() and step_many(): a
// caller there may lead others' call and then wait on for its own step, which must not hold their
// results back. Worker threads take the GIL themselves.
thread_local std::vector<Step*>* deferred_settles = nullptr;

class DeferSettles {
 public:
  explicit DeferSettles(std::vector<Step*>* into) : previous_(deferred_settles) { deferred_settles = into; }
  ~DeferSettles() { deferred_settles = previous_; }
  DeferSettles(const DeferSettles&) = delete;
  DeferSettles& operator=(const DeferSettles&) = delete;

 private:
  std::vector<Step*>* previous_;
};

std::string Bytes(nb::handle b) {
  char* data = nullptr;
  Py_ssize_t size = 0;
  if (PyBytes_AsStringAndSize(b.ptr(), &data, &size) != 0) throw nb::python_error();
  return std::string(data, static_cast<size_t>(size));
}

class PyEngine {
 public:
  struct Kind {                  // feeds of one signature (names, types, shapes)
    std::vector<int> shared;     // inputs whose values choose the group
    std::unordered_map<std::string, int> groups;  // their values' bytes -> group
  };

  PyEngine(uintptr_t api_base, nb::bytes model, std::string library, nb::dict options, nb::list providers,
           std::vector<std::pair<std::string, int32_t>> step_inputs,
           std::vector<std::pair<std::string, std::string>> carry, nb::dict config, nb::object make_error,
           nb::object settle, bool device_states)
      : make_error_(std::move(make_error)), settle_(std::move(settle)),
        numpy_empty_(nb::module_::import_("numpy").attr("empty")) {
    InitOrtApi(reinterpret_cast<const OrtApiBase*>(api_base));
    SessionSpec spec;
    spec.model = Bytes(model);
    std::string single_model;
    spec.library_path = library;
    for (auto [k, v] : options) {
      const std::string key = nb::cast<std::string>(k);
      if (key == "intra_op_num_threads") spec.intra_op_threads = nb::cast<int>(v);
      else if (key == "inter_op_num_threads") spec.inter_op_threads = nb::cast<int>(v);
      else if (key == "graph_optimization_level") spec.graph_optimization_level = nb::cast<int>(v);
      else if (key == "execution_mode") spec.execution_mode = nb::cast<int>(v);
      else if (key == "enable_cpu_mem_arena") spec.cpu_mem_arena = nb::cast<bool>(v);
      else if (key == "enable_mem_pattern") spec.mem_pattern = nb::cast<bool>(v);
      else if (key == "log_severity_level") spec.log_severity = nb::cast<int>(v);
      else if (key == "config") spec.config = nb::cast<KeyValues>(v);
      else if (key == "profile_file_prefix") spec.profile_prefix = nb::cast<std::string>(v);
      else if (key == "cuda_graphs") spec.cuda_graphs = nb::cast<bool>(v);
      else if (key == "single_model") single_model = Bytes(v);
      else if (key == "wide_from_seconds") spec.wide_from_seconds = nb::cast<double>(v);
      else throw std::invalid_argument("unknown session option " + key);
    }
    for (nb::handle p : providers) spec.providers.push_back(nb::cast<std::pair<std::string, KeyValues>>(p));
    std::vector<std::string> names;
    for (const auto& [name, type] : step_inputs) {
      names.push_back(name);
      input_names_.push_back(nb::steal(PyUnicode_InternFromString(name.c_str())));
      input_types_.push_back(type);
    }
    EngineConfig c;
    c.max_batch = nb::cast<int>(config["max_batch"]);
    c.max_wait = nb::cast<double>(config["max_wait"]);
    c.max_calls = nb::cast<int>(config["max_calls"]);
    c.workers = nb::cast<int>(config["workers"]);
    if (config.contains("submitter_calls")) c.submitter_calls = nb::cast<int>(config["submitter_calls"]);
    if (config.contains("callers_wake_in_turn")) c.callers_wake_in_turn = nb::cast<bool>(config["callers_wake_in_turn"]);
    if (config.contains("pad_below")) c.pad_below = nb::cast<int>(config["pad_below"]);
    std::unique_ptr<CallRunner> runner;
    if (!device_states) {
      runner = std::make_unique<OrtHostRunner>(spec, names, carry, single_model);
    } else {
      auto device = std::make_unique<OrtDeviceRunner>(spec, names, carry);
      device_ = device.get();
      runner = std::move(device);
    }
    runner_ = runner.get();
    engine_ = std::make_unique<Engine>(c, std::move(runner), [this](std::vector<Step*>& steps) { Settle(steps); });
  }

  ~PyEngine() {
    nb::gil_scoped_release release;
    engine_.reset();
  }

  // One stream's state per carried input; on a device, with the models that write, read and
  // grow the slot arrays (device.py).
  void SetStates(std::vector<std::pair<std::vector<int64_t>, int32_t>> states, nb::object device_models) {
    if (device_ && !device_models.is_none()) {
      DeviceModels models;
      models.writer = Bytes(device_models["writer"]);
      models.reader = Bytes(device_models["reader"]);
      models.grow = Bytes(device_models["grow"]);
      nb::gil_scoped_release release;
      device_->SetModels(models);
    }
    std::vector<TensorLayout> layouts;
    for (auto& [shape, type] : states) {
      TensorLayout t;
      t.type = type;
      t.elem_size = ElementSize(type);
      t.shape = shape;
      layouts.push_back(std::move(t));
    }
    state_types_.clear();
    for (auto& t : layouts) state_types_.push_back(t);
    engine_->SetStateLayouts(layouts);
  }

  // A kind of step, from the Python analysis: returns its group's id.
  int AddGroup(std::vector<std::vector<int64_t>> shapes, std::vector<int> input_axes, std::vector<int> shared,
               std::vector<nb::bytes> shared_values, std::vector<int> state_axes, std::vector<int> output_axes,
               std::vector<int64_t> output_rows, int limit) {
    GroupSpec spec;
    for (size_t k = 0; k < shapes.size(); ++k) {
      TensorLayout t;
      t.type = input_types_[k];
      t.elem_size = ElementSize(t.type);
      t.shape = shapes[k];
      t.batch_axis = input_axes[k];
      spec.inputs.push_back(std::move(t));
    }
    spec.shared.assign(shapes.size(), false);
    spec.shared_values.resize(shapes.size());
    std::string values;
    for (size_t j = 0; j < shared.size(); ++j) {
      spec.shared[shared[j]] = true;
      const std::string v = Bytes(shared_values[j]);
      spec.shared_values[shared[j]].assign(v.begin(), v.end());
      values += v;
    }
    spec.state_axes = std::move(state_axes);
    spec.output_axes = std::move(output_axes);
    spec.output_rows = std::move(output_rows);
    spec.limit = limit;
    const int id = engine_->AddGroup(std::move(spec));
    Kind& kind = kinds_[Signature(shapes)];
    kind.shared = shared;
    kind.groups[values] = id;
    return id;
  }

  // A group's own models (specialize.py), which its calls run from now on.
  void AddGroupModels(int group, nb::bytes batched, nb::bytes single) {
    const std::string b = Bytes(batched), s = Bytes(single);
    nb::gil_scoped_release release;
    runner_->AddGroupModels(group, b, s);
  }

  // A group's calls of one stream on its CUDA graph so far, and why it replays none ("" where it does).
  std::pair<int64_t, std::string> GraphUse(int group) {
    if (!device_) return {0, "the engine keeps its states on the host"};
    return device_->GraphUse(group);
  }

  // Whether each group gets a graphed session of its one-stream model (the runner decides).
  bool MakesGraphedSessions() { return device_ && device_->GraphedSessionsRefusal().empty(); }

  // The wrapped model of calls with the states' batch on these axes (device states only).
  void AddDeviceModel(std::vector<int> axes, nb::bytes model) {
    if (!device_) throw std::logic_error("add_device_model: this engine keeps its states on the host");
    const std::string bytes = Bytes(model);
    nb::gil_scoped_release release;
    device_->AddModel(axes, bytes);
  }

  int64_t Open(std::vector<nb::bytes> initial) {
    std::vector<std::string> held;
    std::vector<const void*> values;
    for (nb::bytes& b : initial) held.push_back(Bytes(b));
    for (const std::string& h : held) values.push_back(h.data());
    try {
      return engine_->Open(values);
    } catch (const EngineError& e) {
      Raise(e.failure, e.what());
    }
  }

  void Close(int64_t id) {
    Failure failure = Failure::kNone;
    std::string message;
    RunReleased([&] {
      try {
        engine_->Close(id);
      } catch (const EngineError& e) {
        failure = e.failure;
        message = e.what();
      }
    });
    if (failure != Failure::kNone) Raise(failure, message);
  }

  nb::list State(int64_t id) {
    std::vector<std::vector<char>> values;
    try {
      engine_->ReadState(id, &values);
    } catch (const EngineError& e) {
      Raise(e.failure, e.what());
    }
    nb::list out;
    for (size_t s = 0; s < values.size(); ++s) out.append(Array(values[s].data(), state_types_[s].shape, state_types_[s].type));
    return out;
  }

  // One step: its outputs, or None where Python must look at it first.
  nb::object StepOne(nb::handle stream, nb::handle feeds) {
    Step step;
    if (!Prepare(stream, feeds, &step)) return nb::none();
    Waiter waiter;
    waiter.remaining = 1;
    step.waiter = &waiter;
    Failure failure = Failure::kNone;
    std::string message;
    {
      nb::gil_scoped_release release;
      try {
        engine_->Enqueue({&step});
        engine_->Wait(waiter);
      } catch (const EngineError& e) {
        failure = e.failure;
        message = e.what();
      }
    }
    if (failure != Failure::kNone) Raise(failure, message);
    if (step.failure != Failure::kNone) Raise(step.failure, step.message);
    return Outputs(step);
  }

  // Several steps, one wait; None where Python must look at one of them first.
  nb::object StepMany(nb::handle pairs, bool return_exceptions) {
    if (!PyList_CheckExact(pairs.ptr())) return nb::none();
    const Py_ssize_t n = PyList_Size(pairs.ptr());
    std::vector<std::unique_ptr<Step>> steps;
    steps.reserve(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyObject* pair = PyList_GetItem(pairs.ptr(), i);
      if (!PyTuple_Check(pair) || PyTuple_Size(pair) != 2) return nb::none();
      steps.push_back(std::make_unique<Step>());
      if (!Prepare(PyTuple_GetItem(pair, 0), PyTuple_GetItem(pair, 1), steps.back().get())) return nb::none();
    }
    Waiter waiter;
    waiter.remaining = static_cast<int>(n);
    std::vector<Step*> raw;
    for (auto& s : steps) {
      s->waiter = &waiter;
      raw.push_back(s.get());
    }
    Failure failure = Failure::kNone;
    std::string message;
    {
      nb::gil_scoped_release release;
      try {
        engine_->Enqueue(raw);
        engine_->Wait(waiter);
      } catch (const EngineError& e) {
        failure = e.failure;
        message = e.what();
      }
    }
    if (failure != Failure::kNone) Raise(failure, message);
    nb::list out;
    for (auto& s : steps) {
      if (s->failure == Failure::kNone) {
        out.append(Outputs(*s));
      } else if (return_exceptions) {
        out.append(make_error_(static_cast<int>(s->failure), s->message));
      } else {
        Raise(s->failure, s->message);
      }
    }
    return out;
  }

  // One step whose result goes to `future` (through Python's settle(future, outputs or error)):
  // False where Python must look at it first. `run_here`: the step may run on this thread before
  // Submit returns (Engine::Enqueue decides).
  bool Submit(nb::handle stream, nb::handle feeds, nb::object future, bool run_here) {
    auto step = std::make_unique<Step>();
    if (!Prepare(stream, feeds, step.get())) return false;
    step->token = future.release().ptr();
    Failure failure = Failure::kNone;
    std::string message;
    bool lead = false;
    // Queued with the GIL held: the engine's lock is only ever held briefly and never while
    // waiting for the GIL (its completions run outside it), and releasing the GIL here handed it
    // to another thread at every submit, a wait to get it back under load (open loop, 500 streams
    // of a tiny model from 8 threads: late chunks and client p50 ms).
    try {
      lead = engine_->Enqueue({step.get()}, run_here);
    } catch (const EngineError& e) {
      failure = e.failure;
      message = e.what();
    }
    if (failure != Failure::kNone) {
      Py_DECREF(static_cast<PyObject*>(step->token));
      Raise(failure, message);
    }
    step.release();  // the engine's until Settle
    if (lead) RunReleased([&] { engine_->Lead(); });  // the future is done when Submit returns
    return true;
  }

  // step_batch: stacked feeds (contiguous arrays, in the model's order) of these idle streams.
  nb::list StepStacked(std::vector<int64_t> ids, int group, std::vector<nb::handle> arrays) {
    Buffers buffers(arrays.size());
    CallInputs in;
    for (size_t k = 0; k < arrays.size(); ++k) {
      Py_buffer& view = buffers.views[k];
      if (PyObject_GetBuffer(arrays[k].ptr(), &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) throw nb::python_error();
      ++buffers.held;
      in.data.push_back(view.buf);
      in.shapes.emplace_back(view.shape, view.shape + view.ndim);
      in.types.push_back(input_types_[k]);
    }
    std::vector<CallOutput> outs;
    std::shared_ptr<void> keep;
    Failure failure = Failure::kNone;
    std::string message;
    {
      nb::gil_scoped_release release;
      try {
        keep = engine_->RunStacked(ids, group, std::move(in), &outs);
      } catch (const EngineError& e) {
        failure = e.failure;
        message = e.what();
      }
    }
    if (failure != Failure::kNone) Raise(failure, message);
    nb::list out;
    for (const CallOutput& o : outs)
      out.append(TensorLayout{o.type, o.elem_size, o.shape}.Bytes() >= kLendBytes ? Lent(o, keep)
                                                                                  : Array(o.data, o.shape, o.type));
    return out;
  }

  nb::dict Stats() {
    StatsSnapshot s;
    {
      nb::gil_scoped_release release;
      s = engine_->Stats();
    }
    nb::dict d;
    d["steps"] = s.steps;
    d["calls"] = s.calls;
    d["failed"] = s.failed;
    d["rescued"] = s.rescued;
    d["wide_calls"] = runner_->WideCalls();  // since the engine began (ResetStats keeps it)
    d["first"] = s.first;
    d["last"] = s.last;
    d["waits"] = s.waits;
    d["latencies"] = s.latencies;
    return d;
  }

  void ResetStats() { engine_->ResetStats(); }
  size_t OpenStreams() { return engine_->open_streams(); }
  bool IsOpen(int64_t id) { return engine_->is_open(id); }
  bool Stopping() { return engine_->stopping(); }

  void Shutdown(bool wait) {
    nb::gil_scoped_release release;
    engine_->Shutdown(wait);
  }

 private:
  static std::string Signature(const std::vector<std::vector<int64_t>>& shapes) {
    std::string key;
    for (const auto& shape : shapes) {
      key.push_back(static_cast<char>(shape.size()));
      key.append(reinterpret_cast<const char*>(shape.data()), shape.size() * sizeof(int64_t));
    }
    return key;
  }

  // The fast path's checks: a known stream id type, a dict of exactly the step inputs, each a
  // C-contiguous buffer of the input's type, of shapes and shared values seen before. Fills
  // `step` (its own copy of the feeds) or returns false.
  bool Prepare(nb::handle stream, nb::handle feeds, Step* step) {
    if (!PyLong_CheckExact(stream.ptr()) || !PyDict_CheckExact(feeds.ptr())) return false;
    int overflow = 0;
    step->stream_id = PyLong_AsLongLongAndOverflow(stream.ptr(), &overflow);
    if (overflow) return false;
    const size_t n = input_names_.size();
    if (static_cast<size_t>(PyDict_Size(feeds.ptr())) != n) return false;
    Buffers buffers(n);
    std::string key;
    for (size_t k = 0; k < n; ++k) {
      PyObject* value = PyDict_GetItem(feeds.ptr(), input_names_[k].ptr());  // borrowed
      if (!value) return false;
      Py_buffer& view = buffers.views[k];
      if (PyObject_GetBuffer(value, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
        PyErr_Clear();
        return false;
      }
      ++buffers.held;
      if (TypeOfFormat(view.format, static_cast<size_t>(view.itemsize)) != input_types_[k]) return false;
      key.push_back(static_cast<char>(view.ndim));
      for (int d = 0; d < view.ndim; ++d) {
        const int64_t dim = view.shape[d];
        key.append(reinterpret_cast<const char*>(&dim), sizeof dim);
      }
    }
    auto kind = kinds_.find(key);
    if (kind == kinds_.end()) return false;
    std::string values;
    for (int k : kind->second.shared)
      values.append(static_cast<const char*>(buffers.views[k].buf), static_cast<size_t>(buffers.views[k].len));
    auto found = kind->second.groups.find(values);
    if (found == kind->second.groups.end()) return false;
    Group* g = engine_->group(found->second);
    step->group = g;
    step->submitted = Now();
    step->feeds.reset(new char[std::max<size_t>(g->feed_bytes, 1)]);
    for (size_t k = 0; k < n; ++k)
      if (!g->shared[k])
        std::memcpy(step->feeds.get() + g->feed_offset[k], buffers.views[k].buf, static_cast<size_t>(buffers.views[k].len));
    return true;
  }

  // A numpy array holding a copy of `data`: numpy.empty(shape, dtype) and a memcpy, about 0.3 us
  // where numpy.asarray over a buffer object (nanobind's ndarray export) costs 1-2 us an array.
  nb::object Array(const void* data, const std::vector<int64_t>& shape, int32_t type, nb::handle = nb::handle()) {
    nb::object dims = nb::steal(PyTuple_New(static_cast<Py_ssize_t>(shape.size())));
    size_t bytes = ElementSize(type);
    for (size_t d = 0; d < shape.size(); ++d) {
      PyTuple_SET_ITEM(dims.ptr(), d, PyLong_FromLongLong(shape[d]));
      bytes *= static_cast<size_t>(shape[d]);
    }
    nb::object array = numpy_empty_(dims, NumpyType(type));
    if (bytes) {
      Py_buffer view;
      if (PyObject_GetBuffer(array.ptr(), &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) != 0) throw nb::python_error();
      std::memcpy(view.buf, data, bytes);
      PyBuffer_Release(&view);
    }
    return array;
  }

  // A tick's outputs run to megabytes (silero, 10,000 streams: a 10 MB state): copied, the copy and
  // its fresh pages cost ~1-2 ms of a 7 ms call on the H100. Above this size the array is lent
  // instead: it reads the call's own output, which the call's hold keeps alive as long as the array.
  static constexpr size_t kLendBytes = 64 * 1024;

  static nb::object Lent(const CallOutput& o, const std::shared_ptr<void>& hold) {
    nb::capsule owner(new std::shared_ptr<void>(hold),
                      [](void* p) noexcept { delete static_cast<std::shared_ptr<void>*>(p); });
    const std::vector<size_t> shape(o.shape.begin(), o.shape.end());
    return nb::ndarray<nb::numpy>(const_cast<void*>(o.data), shape.size(), shape.data(), owner, nullptr,
                                  DlpackType(o.type))
        .cast();
  }

  static nb::dlpack::dtype DlpackType(int32_t type) {
    switch (type) {
      case 1: return nb::dtype<float>();
      case 11: return nb::dtype<double>();
      case 10: return {static_cast<uint8_t>(nb::dlpack::dtype_code::Float), 16, 1};
      case 9: return nb::dtype<bool>();
      case 3: return nb::dtype<int8_t>();
      case 5: return nb::dtype<int16_t>();
      case 6: return nb::dtype<int32_t>();
      case 7: return nb::dtype<int64_t>();
      case 2: return nb::dtype<uint8_t>();
      case 4: return nb::dtype<uint16_t>();
      case 12: return nb::dtype<uint32_t>();
      case 13: return nb::dtype<uint64_t>();
      default: throw std::invalid_argument("no numpy type for ONNX element type " + std::to_string(type));
    }
  }

  nb::handle NumpyType(int32_t type) {
    auto it = numpy_types_.find(type);
    if (it != numpy_types_.end()) return it->second;
    nb::object numpy = nb::module_::import_("numpy");
    nb::object dtype = numpy.attr("dtype")(NumpyName(type).c_str());
    return numpy_types_.emplace(type, dtype).first->second;
  }

  static std::string NumpyName(int32_t type) {
    const nb::dlpack::dtype d = DlpackType(type);
    if (d.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Bool)) return "bool";
    const char* kind = d.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Float) ? "float"
                       : d.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Int) ? "int" : "uint";
    return kind + std::to_string(d.bits);
  }

  nb::object Outputs(Step& step) {
    const char* block = step.result.block.get();
    nb::object out = nb::steal(PyList_New(static_cast<Py_ssize_t>(step.result.outputs.size())));
    for (size_t j = 0; j < step.result.outputs.size(); ++j) {
      const StepOutputs::Output& o = step.result.outputs[j];
      PyList_SET_ITEM(out.ptr(), j, Array(block + o.offset, o.shape, o.type).release().ptr());
    }
    return out;
  }

  [[noreturn]] void Raise(Failure failure, const std::string& message) {
    nb::object error = make_error_(static_cast<int>(failure), message);
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
    throw nb::python_error();
  }

  // `call` with the GIL released; the futures it finishes on this thread are settled once the GIL
  // is back (DeferSettles), also where it throws.
  template <typename Call>
  void RunReleased(Call&& call) {
    std::vector<Step*> done;
    try {
      DeferSettles defer(&done);
      nb::gil_scoped_release release;
      call();
    } catch (...) {
      SettleHeld(done);
      throw;
    }
    SettleHeld(done);
  }

  // Futures' steps, done: on an engine thread, without the engine's lock. Deferred where this
  // thread is inside a call of ours that will hold the GIL again (DeferSettles).
  void Settle(std::vector<Step*>& steps) {
    if (deferred_settles) {
      deferred_settles->insert(deferred_settles->end(), steps.begin(), steps.end());
      return;
    }
    nb::gil_scoped_acquire gil;
    SettleHeld(steps);
  }

  // The same, with the GIL held: one call of Python's settle over the (future, result) pairs of
  // every step (a call's futures settled in one loop, not one Python call each).
  void SettleHeld(const std::vector<Step*>& steps) {
    if (steps.empty()) return;
    nb::list done;
    for (Step* step : steps) {
      std::unique_ptr<Step> owned(step);
      nb::object future = nb::steal(static_cast<PyObject*>(step->token));
      try {
        nb::object result = step->failure == Failure::kNone ? Outputs(*step)
                                                            : make_error_(static_cast<int>(step->failure), step->message);
        done.append(nb::make_tuple(future, result));
      } catch (nb::python_error& e) {
        e.restore();
        PyErr_WriteUnraisable(future.ptr());
      }
    }
    try {
      settle_(done);
    } catch (nb::python_error& e) {
      e.restore();
      PyErr_WriteUnraisable(settle_.ptr());
    }
  }

  std::unique_ptr<Engine> engine_;
  OrtDeviceRunner* device_ = nullptr;  // the engine's runner, where it keeps the states on a device
  CallRunner* runner_ = nullptr;       // the engine's runner
  std::vector<nb::object> input_names_;
  std::vector<int32_t> input_types_;
  std::vector<TensorLayout> state_types_;
  std::unordered_map<std::string, Kind> kinds_;
  nb::object make_error_, settle_;
  nb::object numpy_empty_;
  std::unordered_map<int32_t, nb::object> numpy_types_;
};

}  // namespace

NB_MODULE(_engine, m) {
  m.doc() = "lstm_ort's native step path for StreamBatcher (custom_ops/streams)";
  nb::class_<PyEngine>(m, "Engine")
      .def(nb::init<uintptr_t, nb::bytes, std::string, nb::dict, nb::list, std::vector<std::pair<std::string, int32_t>>,
                    std::vector<std::pair<std::string, std::string>>, nb::dict, nb::object, nb::object, bool>())
      .def("add_device_model", &PyEngine::AddDeviceModel)
      .def("set_states", &PyEngine::SetStates, nb::arg("states"), nb::arg("device_models").none() = nb::none())
      .def("add_group", &PyEngine::AddGroup)
      .def("add_group_models", &PyEngine::AddGroupModels)
      .def("graph_use", &PyEngine::GraphUse)
      .def("makes_graphed_sessions", &PyEngine::MakesGraphedSessions)
      .def("open", &PyEngine::Open)
      .def("close", &PyEngine::Close)
      .def("state", &PyEngine::State)
      // None is a value like any other here: the slow path names what is wrong with it.
      .def("step", &PyEngine::StepOne, nb::arg("stream").none(), nb::arg("feeds").none())
      .def("step_many", &PyEngine::StepMany, nb::arg("pairs").none(), nb::arg("return_exceptions"))
      .def("submit", &PyEngine::Submit, nb::arg("stream").none(), nb::arg("feeds").none(), nb::arg("future"),
           nb::arg("run_here"))
      .def("step_stacked", &PyEngine::StepStacked)
      .def("stats", &PyEngine::Stats)
      .def("reset_stats", &PyEngine::ResetStats)
      .def("open_streams", &PyEngine::OpenStreams)
      .def("is_open", &PyEngine::IsOpen)
      .def("stopping", &PyEngine::Stopping)
      .def("shutdown", &PyEngine::Shutdown);
}
