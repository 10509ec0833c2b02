// A define-by-run tape. Ops run their forward kernels eagerly and, when recording, push a Node that
// holds exactly the tensors its backward needs -- each one passed through Recording::save(), the
// single call where the active policy and the accountant see it. Backward walks the tape in reverse,
// frees each node right after its backward, and drops the gradients of that node's outputs.
//
// Gradients live in a GradTable keyed by storage id. Parameters are bound to their persistent
// gradient buffers before backward; activation gradients are created on first use and freed once
// their producer has consumed them. Every backward kernel ADDS into its outputs, so accumulation
// order is the tape order: identical across checkpoint strategies, hence bit-identical gradients.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"

namespace remat::autograd {

// The identity of a tensor without its storage: lets a node address an input's gradient without
// keeping the input alive (retention the accountant could not see).
struct Ref {
  uint64_t id = 0;
  Shape shape;
  std::string name;
  DType dtype = DType::F32;  // its gradient's dtype
  static Ref of(const Tensor& t) { return {t.id(), t.shape(), t.name(), t.dtype()}; }
};

class GradTable {
 public:
  // Gradient of `t`, or nullptr if nothing has flowed into it (it is zero).
  Tensor* find(const Tensor& t) { return find_id(t.id()); }
  Tensor* find_id(uint64_t id);
  // Gradient of `t`, created as zeros (ActivationGrad, "d<name>", t's dtype) if absent. A bf16
  // activation's gradient is bf16; a parameter's is bound (fp32) before backward, and so is the
  // matmul copy's of a bf16 weight (to its master's fp32 gradient).
  Tensor& get(const Tensor& t) { return get(t.id(), t.shape(), t.name(), t.dtype()); }
  Tensor& get(const Ref& r) { return get(r.id, r.shape, r.name, r.dtype); }
  Tensor& get(uint64_t id, const Shape& shape, const std::string& name, DType dtype = DType::F32);
  // Gradient of `r`; if absent, created uninitialised and *fresh is set: the caller must write
  // (not accumulate into) every element.
  Tensor& get_fresh(const Ref& r, bool* fresh);
  // Binds a persistent gradient buffer (parameters) or hands over a gradient.
  void bind(const Tensor& t, Tensor grad);
  void bind_id(uint64_t id, Tensor grad);
  // Removes and returns the gradient of `id` (empty Tensor if none).
  Tensor take(uint64_t id);
  void erase(uint64_t id) { g_.erase(id); }
  void clear() { g_.clear(); }
  size_t size() const { return g_.size(); }

 private:
  std::unordered_map<uint64_t, Tensor> g_;
};

struct SavedSlot {
  std::string slot;  // "inp", "mean", "probs", ...
  Tensor tensor;
};

struct Recipe;
class Node;

// What a node keeps for one slot: the tensor itself, or -- when the policy dropped it -- a recipe
// that rebuilds it during backward by replaying its producing op on tensors that are kept anyway
// (selective recomputation). `ref` is the original's identity, the key of its gradient.
class Saved {
 public:
  Ref ref;
  // The tensor: the kept one, or a fresh rebuild (Category::Recompute, freed by the caller).
  Tensor get() const;
  bool kept() const { return t_.defined(); }
  bool defined() const { return t_.defined() || recipe_ != nullptr; }

 private:
  friend Saved save(Node& n, const char* slot, const Tensor& t);
  Tensor t_;
  std::shared_ptr<const Recipe> recipe_;
};

// How an op rebuilds one of its outputs from its inputs (all kept), for selective recomputation.
struct Recipe {
  std::string name;                                   // the tensor it rebuilds
  Tensors inputs;                                     // kept tensors it reads
  std::function<Tensor(const Tensors&)> fn;           // replays the producing kernel
  double flops = 0;
  // --determinism-check: the dropped tensor as the forward made it (Category::Debug), which every
  // rebuild must equal bit for bit (no rebuild draws dropout masks: they are deterministic kernels).
  Tensor original;
};

// A tensor the policy dropped: the node rebuilds it in its backward from `from` (all kept).
struct Dropped {
  std::string slot, name;
  Shape shape;
  size_t bytes = 0;
  std::vector<std::string> from;
  double flops = 0;  // per rebuild
};

class Node {
 public:
  virtual ~Node() = default;
  virtual const char* op() const = 0;
  // Reads the gradients of `outputs` and adds into the gradients of its inputs.
  virtual void backward(GradTable& g) = 0;

  std::string name;                // "h.3.ln_1"
  std::vector<uint64_t> outputs;   // ids whose gradients this node consumes
  std::vector<SavedSlot> saved;    // everything held for backward (for accounting)
  std::vector<Dropped> dropped;    // what the policy dropped, rebuilt in this node's backward
  double flops_fwd = 0, flops_bwd = 0;
};

class Tape {
 public:
  void push(std::unique_ptr<Node> n) { nodes_.push_back(std::move(n)); }
  // Reverse-mode sweep; the tape is empty afterwards.
  void backward(GradTable& g);
  bool empty() const { return nodes_.empty(); }
  size_t size() const { return nodes_.size(); }
  void clear() { nodes_.clear(); }
  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  // Bytes of the distinct storages held by this tape's nodes.
  size_t saved_bytes() const;
  // Distinct saved storages: tensor name -> bytes.
  std::unordered_map<std::string, size_t> saved_by_name() const;
  // Bytes each node holds, by node name; a storage two nodes share counts for both.
  std::unordered_map<std::string, size_t> saved_by_op() const;

 private:
  std::vector<std::unique_ptr<Node>> nodes_;
};

// Which named activations a region keeps. The default keeps everything. A dropped tensor is rebuilt
// in backward from its producer's recipe; `strict` says whether asking to drop a tensor that nothing
// can rebuild is an error (save-all-but) or means "keep it after all" (save-only).
class Policy {
 public:
  virtual ~Policy() = default;
  virtual bool keep(const std::string& tensor_name) const { return true; }
  virtual bool strict() const { return true; }
  // Said when a strict policy asks to drop what nothing can rebuild: which names can be dropped.
  virtual std::string drop_hint() const { return "drop only tensors that one op rebuilds from kept inputs"; }
};

// FLOPs and block-forward counts of one step, split by phase.
struct Counters {
  double fwd_flops = 0, recompute_flops = 0, bwd_flops = 0;
  int64_t block_forwards = 0, block_recomputes = 0, block_backwards = 0;
  void reset() { *this = Counters{}; }
};

// Wall time per op, forward, recompute and backward, summed over the ops of one kind at one place in
// the model ("attn.c_attn [linear]": every block's QKV projection). A forward op's time is the time
// since the previous op finished, so a forward must start with mark(); backward times each node.
// `local` maps a tensor name to its name within a block (the model knows its naming); unset, names
// are kept whole.
struct OpProfile {
  struct Entry {
    double fwd_s = 0, rec_s = 0, bwd_s = 0;
    double fwd_flops = 0, rec_flops = 0, bwd_flops = 0;
    int64_t calls = 0;
  };
  std::map<std::string, Entry> ops;
  double last = 0;  // steady-clock seconds of the last forward event
  std::function<std::string(const std::string&)> local;
  void mark();
  // "h.3.attn.c_attn", "linear" -> "attn.c_attn [linear]" (with a GPT-2 `local`)
  std::string key(const std::string& name, const char* op) const;
};

// The thread's recording state: where nodes go, what category saved tensors take, whether this is a
// recompute, and the --determinism-check hooks.
struct Recorder {
  Tape* tape = nullptr;                        // null: run kernels only, save nothing
  Category save_category = Category::SavedActivation;
  bool recompute = false;                      // FLOPs count as recompute
  const Policy* policy = nullptr;
  uint64_t rng_salt = 0;                       // non-zero only to break replay on purpose
  std::vector<Tensor>* capture = nullptr;      // determinism check: clone every would-be save here
  const std::vector<Tensor>* verify = nullptr; // ... and compare recomputed saves against these
  size_t verify_pos = 0;
  bool check_determinism = false;              // checkpoint regions capture and verify their saves
  bool break_replay = false;                   // --debug-break-replay: regions replay with a salted RNG
  Counters* counters = nullptr;
  OpProfile* profile = nullptr;                // remat bench --profile
};
Recorder& recorder();
// Added to dropout seeds on a replay under --debug-break-replay: a replay that draws other masks,
// which the determinism check must catch.
inline constexpr uint64_t kBrokenReplaySalt = 0x5EEDBADull;

// RAII: installs a Recorder for a scope, restoring the previous one.
class RecordScope {
 public:
  explicit RecordScope(const Recorder& r) : prev_(recorder()) { recorder() = r; }
  ~RecordScope() { recorder() = prev_; }
  RecordScope(const RecordScope&) = delete;
  RecordScope& operator=(const RecordScope&) = delete;

 private:
  Recorder prev_;
};

// The one place a tensor is saved for backward: asks the policy, moves a transient tensor's bytes to
// the recorder's save category, and serves --determinism-check. Returns what the node keeps.
Saved save(Node& n, const char* slot, const Tensor& t);
// An op offers to rebuild `out` from `inputs` with `fn` (only recorded while a policy is active;
// forgotten by clear_recipes() at the end of each recorded region's forward).
void offer_recipe(const Tensor& out, Tensors inputs, std::function<Tensor(const Tensors&)> fn, double flops);
void clear_recipes();
// True when ops must build nodes (a tape is recording, or the determinism check captures).
inline bool recording() { const Recorder& r = recorder(); return r.tape || r.capture || r.verify; }
// Records the node's forward FLOPs in the counters and pushes it if a tape is recording.
void finish(std::unique_ptr<Node> n);
// Counts forward FLOPs (and, when profiling, time) of work done while not recording.
void count_forward(const char* op, const std::string& name, double flops);

}  // namespace remat::autograd
