"""Preset transforms, as torchvision's references/classification/presets.py builds them
(the PIL backend): objects that hold a Compose in .transforms and call it. Written for
Ferry's tests from the reference's documented parameters, with one addition DeiT-style
recipes use: color_jitter."""
import torch
from torchvision.transforms import autoaugment, transforms
from torchvision.transforms.functional import InterpolationMode


class ClassificationPresetTrain:
    def __init__(self, *, crop_size, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225),
                 interpolation=InterpolationMode.BILINEAR, hflip_prob=0.5, auto_augment_policy=None, ra_magnitude=9,
                 augmix_severity=3, random_erase_prob=0.0, color_jitter=0.0):
        steps = [transforms.RandomResizedCrop(crop_size, interpolation=interpolation)]
        if hflip_prob > 0:
            steps.append(transforms.RandomHorizontalFlip(hflip_prob))
        if auto_augment_policy == "ra":
            steps.append(autoaugment.RandAugment(interpolation=interpolation, magnitude=ra_magnitude))
        elif auto_augment_policy == "ta_wide":
            steps.append(autoaugment.TrivialAugmentWide(interpolation=interpolation))
        elif auto_augment_policy == "augmix":
            steps.append(autoaugment.AugMix(interpolation=interpolation, severity=augmix_severity))
        elif auto_augment_policy is not None:
            steps.append(autoaugment.AutoAugment(policy=autoaugment.AutoAugmentPolicy(auto_augment_policy),
                                                 interpolation=interpolation))
        if color_jitter > 0:
            steps.append(transforms.ColorJitter(color_jitter, color_jitter, color_jitter))
        steps += [transforms.PILToTensor(), transforms.ConvertImageDtype(torch.float),
                  transforms.Normalize(mean=mean, std=std)]
        if random_erase_prob > 0:
            steps.append(transforms.RandomErasing(p=random_erase_prob))
        self.transforms = transforms.Compose(steps)

    def __call__(self, img):
        return self.transforms(img)


class ClassificationPresetEval:
    def __init__(self, *, crop_size, resize_size=256, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225),
                 interpolation=InterpolationMode.BILINEAR):
        self.transforms = transforms.Compose([
            transforms.Resize(resize_size, interpolation=interpolation),
            transforms.CenterCrop(crop_size),
            transforms.PILToTensor(),
            transforms.ConvertImageDtype(torch.float),
            transforms.Normalize(mean=mean, std=std),
        ])

    def __call__(self, img):
        return self.transforms(img)
