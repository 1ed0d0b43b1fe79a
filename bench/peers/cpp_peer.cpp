// TinyGPT training step written directly against MLX's C++ API: the C++
// peer of `posttrainllm bench`, linked to the same libmlx.so (.deps/mlx) as
// the Go binary, so a side-by-side run shows what the Go binding costs on
// top of the library.
//
// The model is model/model.go's (pre-norm RMSNorm blocks, rotary causal
// attention through mlx::core::fast, GELU MLP, optional tied head, float32),
// written the way an MLX user writes it: activations [B, T, D], separate
// q/k/v matmuls, residual adds, GELU as plain ops differentiated by MLX, a
// float32 cross-entropy. The update is train.Step's: N microbatches
// unrolled, gradients averaged, clipped to a global norm, AdamW with bias
// correction and decoupled weight decay on matrices, the learning rate and
// step count as inputs, the whole step compiled with mlx::core::compile
// (or run op by op with --compile 0).
//
// Build: make peers (bench/peers/Makefile). Run: bench/peers/compare.py,
// which passes a preset's shape as flags; alone:
//   bin/cpp_peer --vocab 256 --d-model 128 --layers 4 --heads 4 --context 128 \
//     --batch 8 --accum 1 --steps 20
// --graph-ops 1 prints the first step's operations by primitive to stderr.
// It prints one JSON line in the field names of `posttrainllm bench --json`.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "mlx/mlx.h"
#include "mlx/primitives.h"

namespace mx = mlx::core;

namespace {

struct Config {
  int vocab = 256, d_model = 128, layers = 4, heads = 4, context = 128;
  double mlp_ratio = 4, rope_base = 10000, norm_eps = 1e-5, init_std = 0.02;
  bool tied = false;
  std::string gelu = "exact";
  int batch = 8, accum = 1;
  double lr = 2e-3, min_lr = 2e-4, clip = 1.0, weight_decay = 0.1;
  int warmup_lr = 50;  // learning-rate warm-up, shortened to half the run as bench does
  int warmup = 5, steps = 20;
  bool compile = true, graph_ops = false;
  uint64_t seed = 1;

  int hidden() const { return static_cast<int>(std::lround(mlp_ratio * d_model)); }
  int head_dim() const { return d_model / heads; }
};

// parse reads --name value pairs into cfg; an unknown name or a bad value
// is an error naming it.
Config parse(int argc, char** argv) {
  Config c;
  std::map<std::string, std::string> kv;
  for (int i = 1; i < argc; i++) {
    std::string k = argv[i];
    if (k.rfind("--", 0) != 0 || i + 1 >= argc) {
      throw std::runtime_error("argument " + k + ": want --name value");
    }
    kv[k.substr(2)] = argv[++i];
  }
  auto num = [&](const std::string& k, double& out) {
    if (auto it = kv.find(k); it != kv.end()) {
      char* end = nullptr;
      out = std::strtod(it->second.c_str(), &end);
      if (end == it->second.c_str() || *end != 0) throw std::runtime_error("--" + k + " " + it->second + ": want a number");
      kv.erase(it);
    }
  };
  auto integer = [&](const std::string& k, int& out, int min) {
    double v = out;
    num(k, v);
    if (v != std::floor(v) || v < min) throw std::runtime_error("--" + k + ": want an integer >= " + std::to_string(min));
    out = static_cast<int>(v);
  };
  integer("vocab", c.vocab, 1);
  integer("d-model", c.d_model, 1);
  integer("layers", c.layers, 1);
  integer("heads", c.heads, 1);
  integer("context", c.context, 1);
  integer("batch", c.batch, 1);
  integer("accum", c.accum, 1);
  integer("warmup-lr", c.warmup_lr, 0);
  integer("warmup", c.warmup, 0);
  integer("steps", c.steps, 1);
  num("mlp-ratio", c.mlp_ratio);
  num("rope-base", c.rope_base);
  num("norm-eps", c.norm_eps);
  num("init-std", c.init_std);
  num("lr", c.lr);
  num("min-lr", c.min_lr);
  num("clip", c.clip);
  num("weight-decay", c.weight_decay);
  int tied = c.tied, compile = c.compile, graph_ops = c.graph_ops, seed = 1;
  integer("tied", tied, 0);
  integer("compile", compile, 0);
  integer("graph-ops", graph_ops, 0);
  integer("seed", seed, 0);
  c.tied = tied, c.compile = compile, c.graph_ops = graph_ops, c.seed = seed;
  if (auto it = kv.find("gelu"); it != kv.end()) {
    c.gelu = it->second;
    kv.erase(it);
  }
  if (!kv.empty()) throw std::runtime_error("unknown flag --" + kv.begin()->first);
  if (c.gelu != "exact" && c.gelu != "tanh") throw std::runtime_error("--gelu " + c.gelu + ": want exact or tanh");
  if (c.d_model % c.heads != 0 || c.head_dim() % 2 != 0) {
    throw std::runtime_error("--d-model must be a multiple of --heads with an even head dimension");
  }
  return c;
}

// The flat parameter list, in model.Specs order: tok_embeddings, per block
// attn_norm wq wk wv wo mlp_norm w1 w2, norm, then the head if untied.
constexpr int kPerBlock = 8;

std::vector<mx::array> init_params(const Config& c) {
  auto key = mx::random::key(c.seed);
  std::vector<mx::array> p;
  auto matrix = [&](int out, int in, bool residual) {
    double std = c.init_std / (residual ? std::sqrt(2.0 * c.layers) : 1.0);
    auto ks = mx::random::split(key);
    key = ks.first;
    return mx::random::normal({out, in}, mx::float32, 0.0f, static_cast<float>(std), ks.second);
  };
  auto norm = [&] { return mx::ones({c.d_model}, mx::float32); };
  int d = c.d_model, h = c.hidden();
  p.push_back(matrix(c.vocab, d, false));
  for (int l = 0; l < c.layers; l++) {
    p.push_back(norm());
    p.push_back(matrix(d, d, false));
    p.push_back(matrix(d, d, false));
    p.push_back(matrix(d, d, false));
    p.push_back(matrix(d, d, true));
    p.push_back(norm());
    p.push_back(matrix(h, d, false));
    p.push_back(matrix(d, h, true));
  }
  p.push_back(norm());
  if (!c.tied) p.push_back(matrix(c.vocab, d, false));
  mx::eval(p);
  return p;
}

mx::array linear(const mx::array& x, const mx::array& w) { return mx::matmul(x, mx::transpose(w)); }

mx::array gelu(const mx::array& x, const std::string& kind) {
  if (kind == "tanh") {
    auto u = (x + 0.044715f * x * x * x) * static_cast<float>(std::sqrt(2.0 / M_PI));
    return 0.5f * x * (1.0f + mx::tanh(u));
  }
  return x * 0.5f * (1.0f + mx::erf(x * static_cast<float>(1.0 / std::sqrt(2.0))));
}

// loss is the mean next-token cross-entropy of tokens x [B, T] against y.
mx::array loss(const Config& c, const std::vector<mx::array>& p, const mx::array& x, const mx::array& y) {
  int B = x.shape(0), T = x.shape(1), H = c.heads, hd = c.head_dim(), D = c.d_model;
  float eps = static_cast<float>(c.norm_eps);
  auto heads = [&](const mx::array& t) { return mx::transpose(mx::reshape(t, {B, T, H, hd}), {0, 2, 1, 3}); };
  auto rope = [&](const mx::array& t) {
    return mx::fast::rope(t, hd, false, static_cast<float>(c.rope_base), 1.0f, 0);
  };
  auto h = mx::take(p[0], x, 0);  // [B, T, D]
  for (int l = 0; l < c.layers; l++) {
    const mx::array* b = &p[1 + l * kPerBlock];
    auto a = mx::fast::rms_norm(h, b[0], eps);
    auto q = rope(heads(linear(a, b[1])));
    auto k = rope(heads(linear(a, b[2])));
    auto v = heads(linear(a, b[3]));
    auto o = mx::fast::scaled_dot_product_attention(q, k, v, static_cast<float>(1.0 / std::sqrt(hd)), "causal");
    h = h + linear(mx::reshape(mx::transpose(o, {0, 2, 1, 3}), {B, T, D}), b[4]);
    h = h + linear(gelu(linear(mx::fast::rms_norm(h, b[5], eps), b[6]), c.gelu), b[7]);
  }
  const auto& head = c.tied ? p[0] : p.back();
  auto logits = linear(mx::fast::rms_norm(h, p[1 + c.layers * kPerBlock], eps), head);
  auto lse = mx::logsumexp(logits, -1);
  auto target = mx::squeeze(mx::take_along_axis(logits, mx::expand_dims(y, -1), -1), -1);
  return mx::mean(lse - target);
}

// makeStep returns the update: inputs params, m, v (n each), lr, t, x
// [N, B, T], y [N, B, T]; outputs params', m', v', loss.
std::function<std::vector<mx::array>(const std::vector<mx::array>&)> make_step(const Config& c, size_t n) {
  std::vector<int> argnums(n);
  for (size_t i = 0; i < n; i++) argnums[i] = static_cast<int>(i);
  auto vg = mx::value_and_grad(
      [c, n](const std::vector<mx::array>& in) {
        std::vector<mx::array> p(in.begin(), in.begin() + n);
        return std::vector<mx::array>{loss(c, p, in[n], in[n + 1])};
      },
      argnums);
  return [c, n, vg](const std::vector<mx::array>& in) {
    const auto &lr = in[3 * n], &t = in[3 * n + 1], &x = in[3 * n + 2], &y = in[3 * n + 3];
    std::vector<mx::array> p(in.begin(), in.begin() + n);
    std::vector<mx::array> grads;
    mx::array total = mx::array(0.0f);
    for (int i = 0; i < c.accum; i++) {
      auto args = p;
      args.push_back(mx::take(x, i, 0));
      args.push_back(mx::take(y, i, 0));
      auto [vals, g] = vg(args);
      total = total + vals[0];
      if (grads.empty()) {
        grads = g;
      } else {
        for (size_t j = 0; j < n; j++) grads[j] = grads[j] + g[j];
      }
    }
    if (c.accum > 1) {
      float inv = 1.0f / c.accum;
      total = total * inv;
      for (auto& g : grads) g = g * inv;
    }
    if (c.clip > 0) {
      mx::array sq = mx::array(0.0f);
      for (auto& g : grads) sq = sq + mx::sum(mx::square(g));
      auto scale = mx::minimum(mx::array(1.0f), static_cast<float>(c.clip) / (mx::sqrt(sq) + 1e-6f));
      for (auto& g : grads) g = g * scale;
    }
    const float b1 = 0.9f, b2 = 0.95f, eps = 1e-8f;
    auto bc1 = 1.0f - mx::power(mx::array(b1), t);
    auto sqrt_bc2 = mx::sqrt(1.0f - mx::power(mx::array(b2), t));
    auto step_size = lr / bc1;
    auto decay = 1.0f - lr * static_cast<float>(c.weight_decay);
    std::vector<mx::array> out_p, out_m, out_v;
    for (size_t j = 0; j < n; j++) {
      auto m = b1 * in[n + j] + (1.0f - b1) * grads[j];
      auto v = b2 * in[2 * n + j] + (1.0f - b2) * mx::square(grads[j]);
      auto w = p[j].ndim() >= 2 ? p[j] * decay : p[j];
      out_p.push_back(w - step_size * (m / (mx::sqrt(v) / sqrt_bc2 + eps)));
      out_m.push_back(m);
      out_v.push_back(v);
    }
    std::vector<mx::array> out = out_p;
    out.insert(out.end(), out_m.begin(), out_m.end());
    out.insert(out.end(), out_v.begin(), out_v.end());
    out.push_back(total);
    return out;
  };
}

// print_graph_ops writes to stderr, by primitive name, the operations that
// evaluating outs runs, views included, as mlx.GraphOps counts them (one per
// primitive, whatever its number of outputs): with --compile 0 the step's
// whole graph, to set beside `posttrainllm bench --json`'s
// graph_ops_by_primitive.
void print_graph_ops(const std::vector<mx::array>& outs) {
  std::set<std::uintptr_t> seen;
  std::map<std::string, size_t> counts;
  std::vector<mx::array> stack = outs;
  while (!stack.empty()) {
    mx::array a = std::move(stack.back());
    stack.pop_back();
    if (!a.has_primitive() || !seen.insert(a.id()).second) continue;
    for (auto& s : a.siblings()) seen.insert(s.id());
    counts[a.primitive().name()]++;
    for (auto& in : a.inputs()) stack.push_back(in);
  }
  for (auto& [name, n] : counts) std::fprintf(stderr, "graph op %s %zu\n", name.c_str(), n);
}

// cosine_lr is optim.WarmupCosine as bench sets it up (common.cosine_lr).
double cosine_lr(const Config& c, int step, int total) {
  int warmup = std::min(c.warmup_lr, total / 2);
  if (step < warmup) return c.lr * (step + 1) / (warmup + 1);
  if (step >= total) return c.min_lr;
  int span = total - 1 - warmup;
  if (span <= 0) return c.lr;
  double progress = static_cast<double>(step - warmup) / span;
  return c.min_lr + (c.lr - c.min_lr) * 0.5 * (1 + std::cos(M_PI * progress));
}

// cpu_ms is the CPU time of the process so far, all threads, in ms.
double cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

double quantile(std::vector<double> xs, double q) {
  std::sort(xs.begin(), xs.end());
  double pos = q * (xs.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(pos)), hi = std::min(lo + 1, xs.size() - 1);
  return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo);
}

int run(const Config& c) {
  mx::set_default_device(mx::Device::cpu);
  auto params = init_params(c);
  size_t n = params.size();
  std::vector<mx::array> state = params;
  for (size_t i = 0; i < 2 * n; i++) state.push_back(mx::zeros_like(params[i % n]));
  auto step = make_step(c, n);
  if (c.compile) step = mx::compile(step);

  // Synthetic data: random windows of a seeded uniform token stream.
  std::mt19937_64 rng(c.seed);
  std::vector<int32_t> stream(1 << 18);
  std::uniform_int_distribution<int32_t> tok(0, c.vocab - 1);
  for (auto& t : stream) t = tok(rng);
  std::uniform_int_distribution<size_t> start(0, stream.size() - c.context - 2);
  int per = c.accum * c.batch * c.context;
  std::vector<int32_t> xs(per), ys(per);

  int total = c.warmup + c.steps;
  std::vector<double> times;
  double loss_first = 0, loss_last = 0, cpu_start = 0;
  for (int i = 0; i < total; i++) {
    if (i == c.warmup) cpu_start = cpu_ms();
    auto t0 = std::chrono::steady_clock::now();
    for (int w = 0; w < c.accum * c.batch; w++) {
      size_t s = start(rng);
      std::memcpy(&xs[w * c.context], &stream[s], c.context * sizeof(int32_t));
      std::memcpy(&ys[w * c.context], &stream[s + 1], c.context * sizeof(int32_t));
    }
    mx::Shape shape{c.accum, c.batch, c.context};
    std::vector<mx::array> in = state;
    in.push_back(mx::array(static_cast<float>(cosine_lr(c, i, total))));
    in.push_back(mx::array(static_cast<float>(i + 1)));
    in.push_back(mx::array(xs.data(), shape, mx::int32));
    in.push_back(mx::array(ys.data(), shape, mx::int32));
    auto out = step(in);
    if (c.graph_ops && i == 0) print_graph_ops(out);
    mx::eval(out);
    double l = out.back().item<float>();
    state.assign(out.begin(), out.end() - 1);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!std::isfinite(l)) throw std::runtime_error("step " + std::to_string(i + 1) + ": loss is not finite");
    if (i == 0) loss_first = l;
    loss_last = l;
    if (i == c.warmup - 1) mx::reset_peak_memory();
    if (i >= c.warmup) times.push_back(ms);
  }
  double cpu_per_step = (cpu_ms() - cpu_start) / c.steps;
  double sum = 0;
  for (double t : times) sum += t;
  double steps_per_s = times.size() / (sum / 1e3);
  std::printf(
      "{\"impl\": \"mlx-cpp %s\", \"device\": \"cpu\", \"schedule\": \"cosine\", \"optimizer\": \"adamw\", "
      "\"dtype\": \"float32\", \"gelu\": \"%s\", \"accum\": %d, \"batch\": %d, \"context\": %d, "
      "\"tokens_per_step\": %d, \"params\": %zu, \"warmup_steps\": %d, \"steps\": %zu, "
      "\"ms_per_step_median\": %.4f, \"ms_per_step_p10\": %.4f, \"ms_per_step_p90\": %.4f, "
      "\"steps_per_s\": %.4f, \"tokens_per_s\": %.2f, \"cpu_ms_per_step\": %.4f, \"peak_memory_bytes\": %zu, "
      "\"loss_first\": %.6f, \"loss_last\": %.6f, \"mlx_version\": \"%s\"}\n",
      c.compile ? "compiled" : "interpreted", c.gelu.c_str(), c.accum, c.batch, c.context, per, [&] {
        size_t s = 0;
        for (auto& a : params) s += a.size();
        return s;
      }(), c.warmup, times.size(), quantile(times, 0.5), quantile(times, 0.1), quantile(times, 0.9), steps_per_s,
      steps_per_s * per, cpu_per_step, mx::get_peak_memory(), loss_first, loss_last, mx::version());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cpp_peer: %s\n", e.what());
    return 2;
  }
}
