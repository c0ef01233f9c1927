# PyTorch peer of bench_data_loader: the same input pipeline with
# torch.utils.data (Debian python3-torch 1.13, no torchvision): gzip IDX read,
# uint8 images kept in memory, one shuffled epoch of batches converted to
# float32 / 255 with shape [B, 1, 28, 28], as ToTensor would give.
#   /usr/bin/python3 torch_data_loader.py ROOT BATCH
import gzip, struct, sys, time
import numpy as np
import torch

root, batch = sys.argv[1], int(sys.argv[2])
torch.set_num_threads(1)

t0 = time.perf_counter()
def idx(path):
    b = gzip.open(path).read()
    nd = b[3]
    dims = struct.unpack(">" + "I" * nd, b[4:4 + 4 * nd])
    return np.frombuffer(b, dtype=np.uint8, offset=4 + 4 * nd).reshape(dims)
images = torch.from_numpy(idx(root + "/train-images-idx3-ubyte.gz").copy())
labels = torch.from_numpy(idx(root + "/train-labels-idx1-ubyte.gz").astype(np.int64))
print("torch   load train set (60000 images, gzip IDX): %.3f s" % (time.perf_counter() - t0))

class Fmnist(torch.utils.data.Dataset):
    def __len__(self):
        return len(labels)
    def __getitem__(self, i):
        return images[i].unsqueeze(0).float().div(255), labels[i]

for workers in (0, 1):
    loader = torch.utils.data.DataLoader(Fmnist(), batch_size=batch, shuffle=True, num_workers=workers)
    for rep in range(2):
        t0 = time.perf_counter()
        n = 0
        for x, y in loader:
            n += len(y)
        s = time.perf_counter() - t0
        if rep == 1:
            print("torch   epoch num_workers=%d: %.3f s, %.0f samples/s, %.1f us/batch"
                  % (workers, s, n / s, 1e6 * s / len(loader)))
