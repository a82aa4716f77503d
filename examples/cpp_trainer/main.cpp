// A toy training loop on stalloc's host backend: every step allocates the same activations,
// frees them in backward order, and updates persistent weights. The run is recorded to a trace
// and the allocator's statistics are printed. Usage: cpp_trainer [TRACE_PATH]
#include <stalloc/stalloc.h>

#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

void check(stalloc_status_t status, const char* what) {
  if (status != STALLOC_OK)
    throw std::runtime_error(std::string(what) + ": " + stalloc_status_string(status) + ": " +
                             stalloc_last_error());
}

// A RAII handle, as a C++ trainer would wrap the C API.
class Allocator {
 public:
  explicit Allocator(const char* trace_path) {
    stalloc_options_t options;
    stalloc_options_init(&options);
    options.record_path = trace_path;
    check(stalloc_allocator_create(&options, &handle_), "create");
  }
  ~Allocator() { stalloc_allocator_destroy(handle_); }
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  float* alloc_floats(size_t n) {
    void* p = nullptr;
    check(stalloc_allocator_alloc(handle_, n * sizeof(float), 0, 0, &p), "alloc");
    return static_cast<float*>(p);
  }
  void free(void* p) { check(stalloc_allocator_free(handle_, p), "free"); }
  void step(uint64_t n) { check(stalloc_allocator_step_begin(handle_, n), "step"); }
  stalloc_stats_t stats() {
    stalloc_stats_t s;
    stalloc_stats_init(&s);
    check(stalloc_allocator_stats(handle_, &s), "stats");
    return s;
  }

 private:
  stalloc_allocator_t* handle_ = nullptr;
};

}  // namespace

int main(int argc, char** argv) {
  const char* trace_path = argc > 1 ? argv[1] : "cpp_trainer.stalloc";
  try {
    std::printf("libstalloc %s (header %d)\n", stalloc_version_string(), STALLOC_VERSION);
    if (stalloc_version() != STALLOC_VERSION) throw std::runtime_error("header/library version mismatch");
    const size_t layers = 4, width = 256, batch = 32;
    {
      Allocator allocator(trace_path);
      std::vector<float*> weights;
      for (size_t l = 0; l < layers; l++) {
        weights.push_back(allocator.alloc_floats(width * width));
        for (size_t i = 0; i < width * width; i++) weights[l][i] = 0.001f * float(i % 7);
      }
      float loss = 0;
      for (uint64_t step = 0; step < 5; step++) {
        allocator.step(step);
        std::vector<float*> activations;
        float* x = allocator.alloc_floats(batch * width);
        for (size_t i = 0; i < batch * width; i++) x[i] = 1.0f;
        activations.push_back(x);
        for (size_t l = 0; l < layers; l++) {  // forward: y = W x
          float* y = allocator.alloc_floats(batch * width);
          for (size_t b = 0; b < batch; b++)
            for (size_t o = 0; o < width; o++) {
              float acc = 0;
              for (size_t i = 0; i < width; i++) acc += weights[l][o * width + i] * x[b * width + i];
              y[b * width + o] = acc;
            }
          activations.push_back(y);
          x = y;
        }
        loss = 0;
        for (size_t i = 0; i < batch * width; i++) loss += x[i];
        while (!activations.empty()) {  // backward frees in reverse order
          float* g = allocator.alloc_floats(batch * width);  // a gradient temporary
          std::memcpy(g, activations.back(), batch * width * sizeof(float));
          allocator.free(g);
          allocator.free(activations.back());
          activations.pop_back();
        }
      }
      for (float* w : weights) allocator.free(w);
      stalloc_stats_t s = allocator.stats();
      std::printf("loss %.3f\n", loss);
      std::printf("allocs %llu, frees %llu, peak allocated %llu B, peak reserved %llu B, live %llu\n",
                  (unsigned long long)s.alloc_count, (unsigned long long)s.free_count,
                  (unsigned long long)s.peak_allocated_bytes, (unsigned long long)s.peak_reserved_bytes,
                  (unsigned long long)s.active_blocks);
      if (s.active_blocks != 0 || s.alloc_count != s.free_count) throw std::runtime_error("leak");
    }
    stalloc_trace_t* trace = nullptr;
    check(stalloc_trace_load(trace_path, &trace), "trace_load");
    stalloc_trace_summary_t summary;
    stalloc_trace_summary_init(&summary);
    check(stalloc_trace_summary(trace, &summary), "trace_summary");
    std::printf("trace %s: %llu events, %llu requests, %llu steps, lower bound %llu B\n", trace_path,
                (unsigned long long)summary.events, (unsigned long long)summary.requests,
                (unsigned long long)summary.steps, (unsigned long long)summary.lower_bound);
    stalloc_trace_destroy(trace);
    if (summary.steps != 5 || summary.requests != 4 + 5 * 10) throw std::runtime_error("unexpected trace");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cpp_trainer: %s\n", e.what());
    return 1;
  }
  return 0;
}
