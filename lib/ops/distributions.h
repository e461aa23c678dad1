// Continuous distributions drawn from a sample's (or a batch's) Philox stream, for the
// ops whose torchvision or timm counterparts sample them: standard normals
// (Box-Muller), Gamma (Marsaglia and Tsang), Beta and Dirichlet (normalised Gammas,
// what torch._sample_dirichlet and numpy sample).
#ifndef FERRY_OPS_DISTRIBUTIONS_H_
#define FERRY_OPS_DISTRIBUTIONS_H_

#include <cmath>
#include <numbers>
#include <vector>

#include "core/philox.h"

namespace ferry {

inline double Normal01(SampleRng& rng) {
  double u1 = rng.Uniform();
  while (u1 <= 0) u1 = rng.Uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2 * std::numbers::pi * rng.Uniform());
}

inline double Gamma(double a, SampleRng& rng) {
  if (a < 1) {  // Gamma(a) = Gamma(a + 1) * U^(1/a)
    double u = rng.Uniform();
    while (u <= 0) u = rng.Uniform();
    return Gamma(a + 1, rng) * std::pow(u, 1.0 / a);
  }
  const double d = a - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x, v;
    do {
      x = Normal01(rng);
      v = 1.0 + c * x;
    } while (v <= 0);
    v = v * v * v;
    const double u = rng.Uniform();
    if (u < 1 - 0.0331 * x * x * x * x) return d * v;
    if (u > 0 && std::log(u) < 0.5 * x * x + d * (1 - v + std::log(v))) return d * v;
  }
}

inline double Beta(double alpha, double beta, SampleRng& rng) {
  const double x = Gamma(alpha, rng), y = Gamma(beta, rng);
  return x + y > 0 ? x / (x + y) : 0.5;
}

inline std::vector<double> Dirichlet(double alpha, int n, SampleRng& rng) {
  std::vector<double> g(static_cast<size_t>(n));
  double sum = 0;
  for (double& x : g) sum += (x = Gamma(alpha, rng));
  for (double& x : g) x = sum > 0 ? x / sum : 1.0 / n;
  return g;
}

}  // namespace ferry

#endif  // FERRY_OPS_DISTRIBUTIONS_H_
