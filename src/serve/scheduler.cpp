#include "src/serve/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "src/core/threads.h"
#include "src/eval/logit_kl.h"
#include "src/serve/request.h"
#include "veloxquant/error.h"
#include "veloxquant/kv/cache.h"

namespace vq::serve {

using Clock = std::chrono::steady_clock;

// ---- Job ----

bool Job::next(std::vector<Chunk>* out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return done_ || !chunks_.empty(); });
  while (!chunks_.empty()) {
    out->push_back(std::move(chunks_.front()));
    chunks_.pop_front();
  }
  return !(done_ && out->empty());
}

void Job::emit(Chunk c) {
  if (c.text.empty() && c.logprobs.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    chunks_.push_back(std::move(c));
  }
  cv_.notify_all();
}

void Job::finish(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    finish_reason = reason;
    done_ = true;
  }
  cv_.notify_all();
}

void Job::fail(int status, const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    error = message;
    error_status = status;
    done_ = true;
  }
  cv_.notify_all();
}

// ---- Scheduler ----

// A running sequence.
struct Scheduler::Seq {
  std::shared_ptr<Job> job;
  std::unique_ptr<kv::KvCache> cache;
  std::vector<int32_t> fed;      // the tokens in the cache, in order
  size_t prefill_start = 0;      // where this request's own prefill began (after a reused prefix)
  size_t prefill_pos = 0;        // the next prompt token to feed
  engine::Sampler sampler;
  TextStream text;
  int64_t generated = 0;
  int32_t pending = -1;          // a sampled token to feed at the next pass
  size_t reserved = 0;
  Seq(std::shared_ptr<Job> j, const engine::SamplerParams& sp, std::vector<std::string> stop)
      : job(std::move(j)), sampler(sp), text(std::move(stop)) {}
  bool prefilling() const { return prefill_pos < job->params.prompt.size(); }
};

Scheduler::Scheduler(const engine::Model& model, kv::Method method, SchedulerOptions options)
    : model_(model), method_(std::move(method)), opt_(options), layout_(model.cache_layout()) {
  metrics_.budget_bytes = opt_.kv_budget;
  // OpenMP's thread count is per thread: the scheduler's thread runs the passes, so it takes it.
  const int threads = opt_.threads > 0 ? opt_.threads : num_threads();
  thread_ = std::thread([this, threads] {
    set_num_threads(threads);
    run();
  });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  for (auto& s : active_) s->job->fail(503, "the server is shutting down");
  for (auto& j : queue_) j->fail(503, "the server is shutting down");
}

size_t Scheduler::bytes_for(int64_t tokens) const {
  return kv::estimate_kv_bytes(method_, layout_, tokens, opt_.ubatch);
}

void Scheduler::submit(const std::shared_ptr<Job>& job) {
  const auto& p = job->params;
  if (int64_t(p.prompt.size()) >= opt_.n_ctx) {
    throw ApiError(400, "invalid_request_error", "context_length_exceeded",
                   fmt::format("the prompt has {} tokens; the context holds {} (the prompt and at least one "
                               "generated token must fit)", p.prompt.size(), opt_.n_ctx));
  }
  if (p.prompt.empty()) throw ApiError(400, "invalid_request_error", "invalid_value", "the prompt is empty");
  const size_t need = bytes_for(int64_t(p.prompt.size()) + p.max_new);
  job->kv_bytes = need;
  if (opt_.kv_budget > 0 && need > opt_.kv_budget) {
    throw ApiError(400, "invalid_request_error", "kv_budget_exceeded",
                   fmt::format("the prompt and max_tokens need {:.1f} MiB of KV cache with {}, more than the server's "
                               "--kv-budget of {:.1f} MiB", need / 1048576.0, method_.spec(),
                               opt_.kv_budget / 1048576.0));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.size() >= opt_.queue_limit) {
      throw ApiError(503, "server_error", "queue_full", "the server is busy (the request queue is full); retry later");
    }
    queue_.push_back(job);
    metrics_.queued = int64_t(queue_.size());
  }
  cv_.notify_all();
}

Metrics Scheduler::metrics() const {
  std::lock_guard<std::mutex> lock(mu_);
  return metrics_;
}

void Scheduler::run() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty() || !active_.empty(); });
      if (stop_) return;
    }
    try {
      admit();
      if (!active_.empty()) step();
    } catch (const std::exception& e) {
      // Nothing outside a pass should throw (a failed allocation could): the running sequences end
      // with the error and the server goes on.
      for (auto& s : active_) s->job->fail(500, e.what());
      active_.clear();
      reserved_ = 0;
      for (const auto& k : kept_) reserved_ += k.bytes;
    }
    update_metrics();
  }
}

// Takes waiting jobs while there is a free slot and room in the budget, reusing the longest kept
// cache whose tokens begin the prompt (and making room by dropping kept caches, oldest use first).
void Scheduler::admit() {
  while (int(active_.size()) < opt_.parallel) {
    std::shared_ptr<Job> job;
    {
      std::lock_guard<std::mutex> lock(mu_);
      while (!queue_.empty() && queue_.front()->cancelled()) {
        queue_.front()->fail(499, "cancelled");
        queue_.pop_front();
      }
      if (queue_.empty()) return;
      job = queue_.front();
    }
    const auto& prompt = job->params.prompt;
    auto best = kept_.end();
    for (auto it = kept_.begin(); it != kept_.end(); ++it) {
      const auto& t = it->tokens;
      if (opt_.prefix_cache && t.size() < prompt.size() && std::equal(t.begin(), t.end(), prompt.begin()) &&
          (best == kept_.end() || t.size() > best->tokens.size())) {
        best = it;
      }
    }
    const size_t need = job->kv_bytes;  // computed once, at submit
    const size_t reused = best == kept_.end() ? 0 : best->bytes;
    // Drop kept caches (not the one to reuse), least recently used first, until the job fits.
    while (opt_.kv_budget > 0 && reserved_ - reused + need > opt_.kv_budget) {
      auto victim = kept_.end();
      for (auto it = kept_.rbegin(); it != kept_.rend(); ++it) {
        if (std::next(it).base() != best) {
          victim = std::next(it).base();
          break;
        }
      }
      if (victim == kept_.end()) break;
      reserved_ -= victim->bytes;
      kept_.erase(victim);
    }
    if (opt_.kv_budget > 0 && reserved_ - reused + need > opt_.kv_budget) return;  // waits for room
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.pop_front();
    }
    auto s = std::make_unique<Seq>(job, job->params.sampling, job->params.stop);
    if (best != kept_.end()) {
      s->cache = std::move(best->cache);
      s->fed = std::move(best->tokens);
      reserved_ -= best->bytes;
      kept_.erase(best);
    } else {
      s->cache = std::make_unique<kv::KvCache>(method_, layout_);
    }
    s->prefill_start = s->prefill_pos = s->fed.size();
    s->reserved = need;
    reserved_ += need;
    job->prompt_tokens = int64_t(prompt.size());
    job->cached_tokens = int64_t(s->fed.size());
    count([&](Metrics& m) {
      m.prompt_tokens += int64_t(prompt.size());
      m.prompt_tokens_reused += int64_t(s->fed.size());
      ++m.requests;
    });
    active_.push_back(std::move(s));
  }
}

void Scheduler::finish(Seq& s, const std::string& reason) {
  if (auto rest = s.text.finish(); !rest.empty()) s.job->emit({rest, {}});
  s.job->completion_tokens = s.generated;
  reserved_ -= s.reserved;
  if (opt_.prefix_cache && !s.job->cancelled()) {
    const size_t bytes = s.cache->memory().total();
    if (opt_.kv_budget == 0 || reserved_ + bytes <= opt_.kv_budget) {
      kept_.push_front({std::move(s.fed), std::move(s.cache), bytes});
      reserved_ += bytes;
    }
  }
  s.job->finish(reason);
}

void Scheduler::step() {
  const auto& tok = model_.tokenizer();
  const int64_t V = model_.config().n_vocab;
  // Cancelled sequences go first: their memory is freed now.
  for (auto& s : active_) {
    if (s->job->cancelled()) {
      reserved_ -= s->reserved;
      s->job->fail(499, "cancelled");
      s.reset();
    }
  }
  active_.erase(std::remove(active_.begin(), active_.end(), nullptr), active_.end());
  if (active_.empty()) return;

  // The pass: one token of every decoding sequence, then whole prefill chunks (each cut at
  // multiples of ubatch from its sequence's own prefill start) while the pass has room.
  std::vector<int32_t> tokens;
  std::vector<uint8_t> want;
  engine::CacheBatch batch;
  std::vector<Seq*> owners;  // the sequence of each slice
  int prefill_tokens = 0;
  for (auto& s : active_) {
    if (s->prefilling() || s->pending < 0) continue;
    batch.push_back({s->cache.get(), int(tokens.size()), 1, int64_t(s->fed.size())});
    tokens.push_back(s->pending);
    want.push_back(1);
    owners.push_back(s.get());
  }
  for (auto& s : active_) {
    if (!s->prefilling()) continue;
    const auto& prompt = s->job->params.prompt;
    const size_t end = std::min(prompt.size(), s->prefill_pos + size_t(opt_.ubatch));
    const int n = int(end - s->prefill_pos);
    if (prefill_tokens > 0 && prefill_tokens + n > opt_.ubatch) break;
    batch.push_back({s->cache.get(), int(tokens.size()), n, int64_t(s->fed.size())});
    tokens.insert(tokens.end(), prompt.begin() + int64_t(s->prefill_pos), prompt.begin() + int64_t(end));
    want.resize(tokens.size(), 0);
    want.back() = end == prompt.size() ? 1 : 0;
    owners.push_back(s.get());
    prefill_tokens += n;
  }
  int64_t n_logits = 0;
  for (uint8_t w : want) n_logits += w;
  std::vector<float> logits(size_t(n_logits * V));
  const auto t0 = Clock::now();
  try {
    model_.forward_batch(tokens.data(), batch, want.data(), logits.data(), act_);
  } catch (const std::exception& e) {
    // Nothing of this pass can be trusted: its sequences end with the error.
    for (Seq* s : owners) {
      reserved_ -= s->reserved;
      s->job->fail(500, e.what());
      for (auto& a : active_) {
        if (a.get() == s) a.reset();
      }
    }
    active_.erase(std::remove(active_.begin(), active_.end(), nullptr), active_.end());
    return;
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  count([&](Metrics& m) {
    ++m.passes;
    if (prefill_tokens > 0) m.prefill_seconds += secs * prefill_tokens / double(tokens.size());
    m.decode_seconds += secs * double(tokens.size() - size_t(prefill_tokens)) / double(tokens.size());
  });

  int64_t row = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    Seq& s = *owners[i];
    const int n = batch[i].n;
    s.fed.insert(s.fed.end(), tokens.begin() + batch[i].begin, tokens.begin() + batch[i].begin + n);
    if (s.prefilling()) s.prefill_pos += size_t(n);
    if (!want[size_t(batch[i].begin + n - 1)]) continue;
    const float* lg = logits.data() + row * V;
    ++row;
    s.pending = -1;
    // As `generate`: no token is sampled once the context is full or max_tokens are out.
    if (s.generated >= s.job->params.max_new || int64_t(s.fed.size()) >= opt_.n_ctx) {
      finish(s, "length");
      continue;
    }
    const int32_t id = s.sampler.sample(lg, V);
    if (tok.is_eog(id)) {
      finish(s, "stop");
      continue;
    }
    ++s.generated;
    count([](Metrics& m) { ++m.generated_tokens; });
    Chunk c;
    c.text = s.text.push(tok.piece(id));
    if (s.job->params.logprobs >= 0) {
      // The chosen token's log-probability and the best alternatives'.
      eval::log_softmax(lg, V, &logp_);
      TokenLogprob t{tok.piece(id), float(logp_[size_t(id)]), {}};
      std::vector<int32_t> order(static_cast<size_t>(V));
      std::iota(order.begin(), order.end(), 0);
      const int k = std::min<int>(s.job->params.logprobs, int(V));
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int32_t a, int32_t b) { return lg[a] > lg[b] || (lg[a] == lg[b] && a < b); });
      for (int j = 0; j < k; ++j) t.top.emplace_back(tok.piece(order[size_t(j)]), float(logp_[size_t(order[size_t(j)])]));
      c.logprobs.push_back(std::move(t));
    }
    s.job->emit(std::move(c));
    if (s.text.stopped()) {
      finish(s, "stop");
    } else if (s.generated >= s.job->params.max_new || int64_t(s.fed.size()) + 1 >= opt_.n_ctx) {
      finish(s, "length");  // as `generate`, which feeds this token and then has no room to sample
    } else {
      s.pending = id;
    }
  }
  active_.erase(std::remove_if(active_.begin(), active_.end(),
                               [](const std::unique_ptr<Seq>& s) { return !s->prefilling() && s->pending < 0; }),
                active_.end());
}

void Scheduler::update_metrics() {
  Metrics m = totals_;
  m.budget_bytes = opt_.kv_budget;
  m.reserved_bytes = reserved_;
  m.active = int64_t(active_.size());
  m.kept = int64_t(kept_.size());
  const auto add = [&m](const kv::KvCache& c) {
    const kv::MemoryUsage u = c.memory();
    m.block_bytes += u.block_bytes;
    m.window_bytes += u.window_bytes;
    m.sink_bytes += u.sink_bytes;
    m.param_bytes += u.param_bytes;
  };
  for (const auto& s : active_) add(*s->cache);
  for (const auto& k : kept_) add(*k.cache);
  std::lock_guard<std::mutex> lock(mu_);
  m.queued = int64_t(queue_.size());
  metrics_ = m;
}

}  // namespace vq::serve
