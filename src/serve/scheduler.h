// Continuous batching over one model: every active sequence decodes one token per step in one
// batched forward pass (Model::forward_batch: the weights are read once for all of them), new
// prompts are prefilled in micro-batches cut from their own start and run in the same passes, and
// each sequence has its own compressed cache drawn from one byte budget. Finished conversations'
// caches are kept (least recently used first out) so that a request that continues one prefills
// only what is new.
//
// A request's tokens do not depend on the traffic beside it: each token's row is computed apart
// from the other rows of a pass, a sequence's attention reads its own cache only, and its prefill
// chunks are cut at the same places as when it runs alone. A request that continues a kept cache
// prefills from where that cache ends.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "src/engine/model.h"
#include "src/engine/sampler.h"
#include "src/serve/text_stream.h"
#include "veloxquant/kv/method.h"

namespace vq::serve {

struct TokenLogprob {
  std::string token;
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;  // the most likely alternatives, best first
};

// What a client's handler reads as the sequence runs.
struct Chunk {
  std::string text;
  std::vector<TokenLogprob> logprobs;
};

// One request as the server runs it, shared by the HTTP handler (which reads its chunks and may
// cancel it) and the scheduler's thread (which writes them).
class Job {
 public:
  struct Params {
    std::vector<int32_t> prompt;
    int64_t max_new = 0;      // tokens to generate at most
    engine::SamplerParams sampling;
    std::vector<std::string> stop;
    int logprobs = -1;        // top alternatives per token; -1: none
  };
  explicit Job(Params p) : params(std::move(p)) {}
  const Params params;

  // Waits up to `timeout` for new text (or the end); moves what is there to *out. Returns false
  // once the job is over and everything has been read.
  bool next(std::vector<Chunk>* out, std::chrono::milliseconds timeout);
  // Stops the job at its next step (a client that went away); its memory is freed then.
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }

  // Valid once next() has returned false.
  std::string finish_reason;  // "stop" or "length"; empty with an error
  std::string error;          // set when the job failed
  int error_status = 0;
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  size_t kv_bytes = 0;  // what admission reserves for it (Scheduler::submit sets it)

  // Scheduler side.
  void emit(Chunk c);
  void finish(const std::string& reason);
  void fail(int status, const std::string& message);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Chunk> chunks_;
  bool done_ = false;
  std::atomic<bool> cancelled_{false};
};

struct SchedulerOptions {
  int64_t n_ctx = 4096;     // positions per sequence
  int ubatch = 512;         // prompt tokens per micro-batch (and the most prompt tokens per pass)
  int parallel = 16;        // sequences decoding at once
  size_t queue_limit = 64;  // requests waiting for room
  size_t kv_budget = 0;     // bytes for every cache, kept ones included; 0: no limit
  bool prefix_cache = true;
  int threads = 0;          // for the passes; 0: the constructing thread's OpenMP thread count
};

// A snapshot for /metrics.
struct Metrics {
  size_t block_bytes = 0, window_bytes = 0, sink_bytes = 0, param_bytes = 0;  // active and kept caches
  size_t reserved_bytes = 0, budget_bytes = 0;
  int64_t active = 0, queued = 0, kept = 0;
  int64_t prompt_tokens = 0, prompt_tokens_reused = 0, generated_tokens = 0, requests = 0;
  double prefill_seconds = 0, decode_seconds = 0;
  int64_t passes = 0;
};

class Scheduler {
 public:
  Scheduler(const engine::Model& model, kv::Method method, SchedulerOptions options);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a job. Throws ApiError: 400 when it can never fit (prompt past the context, or more
  // bytes than the whole budget), 503 when the queue is full.
  void submit(const std::shared_ptr<Job>& job);
  Metrics metrics() const;
  const engine::Model& model() const { return model_; }
  const kv::Method& method() const { return method_; }
  const SchedulerOptions& options() const { return opt_; }

 private:
  struct Seq;
  struct Kept {
    std::vector<int32_t> tokens;
    std::unique_ptr<kv::KvCache> cache;
    size_t bytes = 0;
  };

  void run();
  void admit();
  void step();
  void finish(Seq& s, const std::string& reason);
  size_t bytes_for(int64_t tokens) const;
  void update_metrics();
  // Adds to the counters, in totals_ and at once in the published snapshot: a client that has
  // received a token or a reply then finds it counted in /metrics (the snapshot's other fields
  // are refreshed after each pass).
  template <typename F>
  void count(F f) {
    f(totals_);
    std::lock_guard<std::mutex> lock(mu_);
    f(metrics_);
  }

  const engine::Model& model_;
  const kv::Method method_;
  const SchedulerOptions opt_;
  std::vector<kv::LayerConfig> layout_;

  mutable std::mutex mu_;  // queue_, stop_, metrics_ (whose counters count() also writes)
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stop_ = false;
  Metrics metrics_;

  // The scheduler thread's own.
  std::vector<std::unique_ptr<Seq>> active_;
  std::list<Kept> kept_;  // most recently used first
  size_t reserved_ = 0;   // bytes promised to active sequences, plus the kept caches' bytes
  engine::Activations act_;
  std::vector<double> logp_;  // a row's log-probabilities, for logprobs
  Metrics totals_;
  std::thread thread_;
};

}  // namespace vq::serve
