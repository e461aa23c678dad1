/* An example Ferry op plugin (include/ferry/plugin.h), built with the tests and loaded
 * by them: two ops, in plain C, with nothing but <ferry/plugin.h>.
 *
 *   example_noise  {"amount": 0.05}    salt-and-pepper noise: each pixel, with
 *                                      probability amount, black or white (half each).
 *                                      Moves no point (FERRY_MOTION_NONE).
 *   example_shift  {"max_shift": 16}   moves the image right by a whole number of
 *                                      pixels drawn from [0, max_shift], filling the
 *                                      left with black; the size is kept. Says where
 *                                      the points went (FERRY_MOTION_WARP), so boxes
 *                                      and masks follow it.
 *
 * Every draw comes from the sample's FerryRng: the output is the same whatever the
 * worker, thread or worker count. Build: cc -shared -fPIC -I include example_ops.c */
#include <ferry/plugin.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reads a flat JSON object of numbers ({"a": 1.5, "b": 2}): calls `take` for each
 * pair; returns 0, or -1 for anything else. Enough for the example's parameters. */
static int each_number(const char* json, int (*take)(void* ctx, const char* key, size_t n, double v), void* ctx) {
  const char* p = json;
  while (*p == ' ') ++p;
  if (*p++ != '{') return -1;
  for (;;) {
    while (*p == ' ' || *p == ',') ++p;
    if (*p == '}') return 0;
    if (*p++ != '"') return -1;
    const char* key = p;
    while (*p != '"' && *p != 0) ++p;
    if (*p == 0) return -1;
    const size_t n = (size_t)(p - key);
    ++p;
    while (*p == ' ') ++p;
    if (*p++ != ':') return -1;
    char* end = NULL;
    const double v = strtod(p, &end);
    if (end == p) return -1;
    p = end;
    if (take(ctx, key, n, v) != 0) return -1;
  }
}

/* -- example_noise ---------------------------------------------------------------- */

typedef struct { double amount; } Noise;

static int take_noise(void* ctx, const char* key, size_t n, double v) {
  if (n == 6 && memcmp(key, "amount", 6) == 0 && v >= 0 && v <= 1) {
    ((Noise*)ctx)->amount = v;
    return 0;
  }
  return -1;
}

static void* noise_create(const char* params, char* error, size_t size) {
  Noise* s = (Noise*)malloc(sizeof(Noise));
  if (s == NULL) return NULL;
  s->amount = 0.05;
  if (each_number(params, take_noise, s) != 0) {
    snprintf(error, size, "takes {\"amount\": a number in [0, 1]}, not %s", params);
    free(s);
    return NULL;
  }
  return s;
}

static int noise_apply(void* state, const FerryImage* in, FerryImage* out, FerryRng* rng, double* warp, char* error,
                       size_t size) {
  (void)warp, (void)error, (void)size;
  const double amount = ((const Noise*)state)->amount;
  for (int32_t y = 0; y < in->height; ++y) {
    const uint8_t* src = in->data + y * in->stride;
    uint8_t* dst = out->data + y * out->stride;
    for (int32_t x = 0; x < in->width; ++x) {
      const double u = rng->uniform(rng);
      for (int32_t c = 0; c < in->channels; ++c) {
        const int32_t i = x * in->channels + c;
        dst[i] = u < amount / 2 ? 0 : u < amount ? 255 : src[i];
      }
    }
  }
  return 0;
}

/* -- example_shift ---------------------------------------------------------------- */

typedef struct { double max_shift; } Shift;

static int take_shift(void* ctx, const char* key, size_t n, double v) {
  if (n == 9 && memcmp(key, "max_shift", 9) == 0 && v >= 0 && v <= 4096 && v == (double)(int)v) {
    ((Shift*)ctx)->max_shift = v;
    return 0;
  }
  return -1;
}

static void* shift_create(const char* params, char* error, size_t size) {
  Shift* s = (Shift*)malloc(sizeof(Shift));
  if (s == NULL) return NULL;
  s->max_shift = 16;
  if (each_number(params, take_shift, s) != 0) {
    snprintf(error, size, "takes {\"max_shift\": a whole number in [0, 4096]}, not %s", params);
    free(s);
    return NULL;
  }
  return s;
}

static int shift_apply(void* state, const FerryImage* in, FerryImage* out, FerryRng* rng, double* warp, char* error,
                       size_t size) {
  (void)error, (void)size;
  const int32_t dx = (int32_t)rng->below(rng, (uint64_t)((const Shift*)state)->max_shift + 1);
  const int32_t keep = in->width > dx ? in->width - dx : 0;
  for (int32_t y = 0; y < in->height; ++y) {
    uint8_t* dst = out->data + y * out->stride;
    memset(dst, 0, (size_t)(in->width - keep) * (size_t)in->channels);
    memcpy(dst + (size_t)(in->width - keep) * (size_t)in->channels, in->data + y * in->stride,
           (size_t)keep * (size_t)in->channels);
  }
  if (warp != NULL) {  /* (x, y) -> (x + dx, y) */
    static const double identity[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
    memcpy(warp, identity, sizeof(identity));
    warp[2] = dx;
  }
  return 0;
}

static void destroy(void* state) { free(state); }

FERRY_PLUGIN_EXPORT int ferry_plugin_init(const FerryPluginHost* host) {
  static const FerryOpV1 noise = {"example_noise", FERRY_MOTION_NONE, noise_create, destroy, NULL, noise_apply};
  static const FerryOpV1 shift = {"example_shift", FERRY_MOTION_WARP, shift_create, destroy, NULL, shift_apply};
  if (host->abi_version != FERRY_PLUGIN_ABI_VERSION) return 1;
  if (host->register_op(host, &noise) != 0) return 1;
  return host->register_op(host, &shift);
}
