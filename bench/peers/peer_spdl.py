"""Meta's SPDL, in its own idiom: demux each JPEG (spdl.io.demux_image), draw
RandomResizedCrop's box from the image's size, decode through an FFmpeg filter graph
that crops, scales to 224 (bilinear) and flips (spdl.io.decode_packets), convert to
an array; float32 normalized CHW in numpy, or uint8 HWC. SPDL releases the GIL in
its decoders: `threads` decode concurrently (a thread pool, as its pipelines do)."""
import common


def rrc_box(w, h, rng):
    """torchvision's RandomResizedCrop.get_params (scale 0.08-1, ratio 3/4-4/3)."""
    import math
    area = w * h
    for _ in range(10):
        target = area * rng.uniform(0.08, 1.0)
        ratio = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
        cw, ch = int(round(math.sqrt(target * ratio))), int(round(math.sqrt(target / ratio)))
        if 0 < cw <= w and 0 < ch <= h:
            return rng.randint(0, w - cw), rng.randint(0, h - ch), cw, ch
    s = min(w, h)
    return (w - s) // 2, (h - s) // 2, s, s


def main():
    a = common.args()
    import random
    from concurrent.futures import ThreadPoolExecutor
    import numpy as np
    import spdl.io
    mean = np.array(common.MEAN, np.float32).reshape(3, 1, 1) * 255
    std = np.array(common.STD, np.float32).reshape(3, 1, 1) * 255
    rng = random.Random(0)

    def one(path):
        packets = spdl.io.demux_image(path)
        w, h = packets.codec.width, packets.codec.height
        x, y, cw, ch = rrc_box(w, h, rng)
        desc = "crop=%d:%d:%d:%d,scale=224:224:flags=bilinear%s,format=rgb24" % (
            cw, ch, x, y, ",hflip" if rng.random() < 0.5 else "")
        frames = spdl.io.decode_packets(packets, filter_desc=desc)
        img = spdl.io.to_numpy(spdl.io.convert_frames(frames)).reshape(224, 224, 3)
        if a.dtype == "uint8":
            return img
        return (img.transpose(2, 0, 1).astype(np.float32) - mean) / std

    pool = ThreadPoolExecutor(a.threads)

    def batches():
        while True:
            paths = list(a.paths)
            rng.shuffle(paths)
            for i in range(0, len(paths) - a.batch_size + 1, a.batch_size):
                yield np.stack(list(pool.map(one, paths[i:i + a.batch_size])))

    common.measure(batches(), a, lambda b: b.shape[0])


common.run(main)
