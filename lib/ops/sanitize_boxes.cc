// sanitize_boxes: torchvision.transforms.v2.SanitizeBoundingBoxes(min_size, min_area),
// plus min_visibility (albumentations' rule) and boxes_from_masks (ultralytics' tight
// boxes after rotations, ops/targets.h): the rules by which a sample's boxes are
// dropped, with their labels and masks, after its last op (ops/targets.h). It moves
// nothing and may sit anywhere among the image ops; the last one's rules hold. A
// pipeline with targets and no sanitize_boxes drops boxes by the defaults (min_size 1,
// min_area 1), as torchvision's detection references do with theirs, since a box of no
// area makes a detection model's loss NaN.
#include "ops/op.h"

namespace ferry {
namespace {

class SanitizeBoxes final : public Op {
 public:
  explicit SanitizeBoxes(TargetRules rules) : rules_(rules) {}
  bool CommutesWithHFlip() const override { return true; }
  Motion motion() const override { return Motion::kNone; }
  const TargetRules* Sanitizes() const override { return &rules_; }

 private:
  const TargetRules rules_;
};

}  // namespace

void RegisterSanitizeBoxes() {
  RegisterOp("sanitize_boxes", [](OpArgs& a) -> Result<std::unique_ptr<Op>> {
    TargetRules r;
    r.min_size = float(a.Number("min_size", 1.0));
    r.min_area = float(a.Number("min_area", 1.0));
    r.min_visibility = float(a.Number("min_visibility", 0.0));
    r.boxes_from_masks = a.Bool("boxes_from_masks", false);
    a.Require(r.min_size >= 0, "min_size", "must be >= 0");
    a.Require(r.min_area >= 0, "min_area", "must be >= 0");
    a.Require(r.min_visibility >= 0 && r.min_visibility <= 1, "min_visibility", "must be in [0, 1]");
    return std::unique_ptr<Op>(new SanitizeBoxes(r));
  });
}

}  // namespace ferry
