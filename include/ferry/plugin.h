/* Ferry op plugins: image ops of your own, in a shared library, named in a pipeline's
 * op list like the built-in ones.
 *
 *   ferry-worker --plugin /opt/ops/libmyops.so      (also ferry-dispatcher, ferry-local;
 *   FERRY_PLUGIN=/opt/ops/libmyops.so               or the environment, ':'-separated;
 *   ferry.load_plugin("/opt/ops/libmyops.so")       the in-process loader and Python)
 *   {"ops": [{"op": "resize", "size": [224, 224]}, {"op": "my_noise", "amount": 0.1}]}
 *
 * Every process that compiles the pipeline loads the plugin: the trainer's (it checks
 * the spec), the dispatcher's and each worker's. Plugins are the operator's code,
 * loaded from the machine's own files: a job never ships one.
 *
 * A plain C ABI, so that a plugin needs no Ferry or OpenCV headers and any compiler
 * builds it:
 *
 *   #include <ferry/plugin.h>
 *   static void* create(const char* params_json, char* error, size_t error_size) { ... }
 *   static int apply(void* state, const FerryImage* in, FerryImage* out, FerryRng* rng,
 *                    double* warp, char* error, size_t error_size) { ... }
 *   static void destroy(void* state) { ... }
 *   FERRY_PLUGIN_EXPORT int ferry_plugin_init(const FerryPluginHost* host) {
 *     static const FerryOpV1 op = {"my_noise", FERRY_MOTION_NONE, create, destroy, NULL, apply};
 *     return host->register_op(host, &op);
 *   }
 *
 * The contract, which keeps every guarantee of the built-in ops:
 *  - Determinism: an op draws every random number from `rng`, its own stream for this
 *    sample (keyed by the job's seed, the epoch, the sample's index and the op's place
 *    in the pipeline), and from nothing else: then a sample's pixels are the same
 *    whatever the worker, the thread, the worker count or a restart.
 *  - Thread safety: `apply` runs on many threads at once with the same `state`, which
 *    it must only read. `create` and `destroy` run once per compiled pipeline.
 *  - Errors: `create` returns NULL with a message in `error` for bad parameters (the
 *    job is refused, naming the op); `apply` returns non-zero with a message for a
 *    sample it cannot process (the sample is skipped and reported, as a bad image is).
 *    Neither may throw, abort or exit: a plugin runs inside the worker.
 *  - Images: interleaved uint8, RGB (3 channels) or gray (1), rows `stride` bytes
 *    apart. `out` is allocated by Ferry at the size `output_shape` gives (the input's
 *    when it is NULL); `apply` writes all of it.
 *  - Targets: `motion` says what the op does to the image's points, so that boxes and
 *    masks follow: FERRY_MOTION_NONE (colour and per-pixel ops), FERRY_MOTION_WARP
 *    (the op fills `warp`, when not NULL, with the row-major 3x3 homography taking an
 *    input point (x, y, 1), in pixel-edge coordinates, to the output), or
 *    FERRY_MOTION_UNKNOWN (a job with boxes or masks refuses the op, by name).
 */
#ifndef FERRY_PLUGIN_H_
#define FERRY_PLUGIN_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FERRY_PLUGIN_ABI_VERSION 1
#define FERRY_PLUGIN_EXPORT __attribute__((visibility("default")))

typedef struct FerryImage {
  uint8_t* data;
  int32_t height, width, channels; /* channels: 1 or 3 */
  int64_t stride;                  /* bytes between rows */
} FerryImage;

/* This sample's random stream for the op. */
typedef struct FerryRng {
  uint64_t (*next_u64)(struct FerryRng* rng);   /* 64 random bits */
  double (*uniform)(struct FerryRng* rng);      /* in [0, 1), 53 random bits */
  uint64_t (*below)(struct FerryRng* rng, uint64_t n); /* in [0, n), n > 0, unbiased */
  void* impl;                                   /* Ferry's; do not touch */
} FerryRng;

enum { FERRY_MOTION_NONE = 0, FERRY_MOTION_WARP = 1, FERRY_MOTION_UNKNOWN = 2 };

typedef struct FerryOpV1 {
  const char* name; /* [a-z0-9_]+, not a built-in op's name */
  int motion;       /* FERRY_MOTION_* */
  /* Parses the op's parameters (a JSON object without "op"); NULL on error. */
  void* (*create)(const char* params_json, char* error, size_t error_size);
  void (*destroy)(void* state);
  /* The output's size for an input's; NULL: the input's. in_height/in_width are -1
   * when they vary with the image (the op must then give -1 too, or a fixed size).
   * Returns non-zero with a message when the op cannot run on such an input. */
  int (*output_shape)(void* state, int32_t in_height, int32_t in_width, int32_t in_channels, int32_t* out_height,
                      int32_t* out_width, int32_t* out_channels, char* error, size_t error_size);
  /* Transforms one sample. Returns 0, or non-zero with a message (the sample is skipped). */
  int (*apply)(void* state, const FerryImage* in, FerryImage* out, FerryRng* rng, double* warp, char* error,
               size_t error_size);
} FerryOpV1;

typedef struct FerryPluginHost {
  int abi_version; /* FERRY_PLUGIN_ABI_VERSION of the loading Ferry */
  /* Registers an op (the struct and its name must outlive the process: static).
   * Returns 0, or non-zero when the name is taken or malformed. */
  int (*register_op)(const struct FerryPluginHost* host, const FerryOpV1* op);
  void* impl;
} FerryPluginHost;

/* What a plugin exports: registers its ops; returns 0 on success. */
typedef int (*FerryPluginInit)(const FerryPluginHost* host);

#ifdef __cplusplus
}
#endif

#endif /* FERRY_PLUGIN_H_ */
