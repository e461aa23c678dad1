"""torchvision's DataLoader, in its own idiom: ImageFolder-style PIL loading,
RandomResizedCrop(224), RandomHorizontalFlip, ToTensor + Normalize (float32) or
PILToTensor (uint8); one thread: num_workers=0; more: that many worker processes."""
import common


def main():
    a = common.args()
    import torch
    import torchvision.transforms as T
    from PIL import Image
    torch.set_num_threads(1)
    last = [T.ToTensor(), T.Normalize(common.MEAN, common.STD)] if a.dtype == "float32" else [T.PILToTensor()]
    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip()] + last)

    class Files(torch.utils.data.Dataset):
        def __len__(self):
            return len(a.paths)

        def __getitem__(self, i):
            with Image.open(a.paths[i]) as im:
                return tf(im.convert("RGB")), 0

    workers = 0 if a.threads == 1 else a.threads
    loader = torch.utils.data.DataLoader(Files(), batch_size=a.batch_size, shuffle=True, num_workers=workers,
                                         persistent_workers=workers > 0, drop_last=True)
    common.measure(common.forever(lambda: iter(loader)), a, lambda b: b[0].shape[0])


common.run(main)
