"""The self-check questions of every notebook (shown by ``gpulab.exercises.quiz``), about each one's main idea.

Values are computed, never typed in: a matmul's operation count from its shapes, DataParallel's split
from ``gpulab.parallel``, a DDP rank's slice from ``torch.tensor_split``, the sampler's padding from
``DistributedSampler`` itself.
"""

from __future__ import annotations

from gpulab.exercises import Feedback, as_number, collectives, correct, failures, sharding, wrong
from gpulab.exercises import roofline as roofline_checks
from gpulab.exercises.data_parallel import check_replica_sizes
from gpulab.exercises.quiz import Option as O
from gpulab.exercises.quiz import Question



def _matmul_flops(answer: object) -> Feedback:
    m, k, n = 100, 300, 50
    value = as_number(answer)
    if value is None:
        return wrong(f"answer with a number, got {answer!r}")
    if value == 2 * m * k * n:
        return correct(f"each of the {m} x {n} outputs needs {k} multiplications and {k} additions: 2 m k n")
    if value == m * k * n:
        return wrong("that counts the multiplications only: every product is also added to a sum")
    if value in (2 * m**3, 2 * k**3, 2 * n**3):
        return wrong("2 n^3 is for two square n x n matrices; here the three sizes differ")
    return wrong("count per output: the result has m x n numbers, each a sum of k products")


def _rows_per_rank(answer: object) -> Feedback:
    import torch

    batch, ranks = 96, 3
    sizes = [len(s) for s in torch.arange(batch).tensor_split(ranks)]
    if isinstance(answer, (list, tuple)) and len(set(answer)) == 1:
        answer = answer[0]
    value = as_number(answer)
    if value is None:
        return wrong(f"answer with a number of rows, got {answer!r}")
    if value == sizes[0]:
        return correct(f"the global batch of {batch} is sliced over {ranks} ranks: {sizes} rows, one slice each")
    if value == batch:
        return wrong(f"{batch} is the global batch: all {ranks} ranks together see {batch} rows per step")
    if value == batch * ranks:
        return wrong(f"{batch * ranks} is what DistributedSampler with batch_size={batch} on each rank would use: "
                     "a bigger batch, so a different training run")
    return wrong(f"every rank takes its own slice of the {batch} rows of a global batch")


def _sampler_padding(answer: object) -> Feedback:
    import torch
    from torch.utils.data import DistributedSampler, TensorDataset

    size, ranks = 21, 4
    data = TensorDataset(torch.arange(size))
    shards = [list(DistributedSampler(data, num_replicas=ranks, rank=r, shuffle=False)) for r in range(ranks)]
    padded = sum(map(len, shards)) - size
    value = as_number(answer)
    if value is None:
        return wrong(f"answer with a number of samples, got {answer!r}")
    if value == padded:
        return correct(f"every rank gets ceil({size}/{ranks}) = {len(shards[0])} samples, {ranks * len(shards[0])} "
                       f"in all: {padded} samples are repeated")
    if value == 0:
        return wrong(f"{size} is not a multiple of {ranks}: equal shards need padding")
    return wrong(f"every rank gets ceil({size}/{ranks}) samples; the padding is what that adds up to beyond {size}")


QUESTIONS: dict[str, tuple[Question, ...]] = {
    "01": (
        Question("Adding two long vectors (`x + y`) reaches far fewer GFLOP/s than a big matrix multiply on the "
                 "same processor. Why?", (
                     O("An addition is slower than a multiplication.",
                       "no: an addition costs about as much as a multiplication; what differs is the data each needs"),
                     O("Each number is used once, so memory bandwidth, not arithmetic, sets the speed.",
                       "an addition needs fresh bytes for every operation, while a matmul reuses each number n times"),
                     O("PyTorch adds vectors on one thread only.",
                       "no: element-wise operations use many threads too, and still wait for memory"),
                 ), answer="b"),
        Question("How many floating-point operations does multiplying a 100 x 300 matrix by a 300 x 50 matrix "
                 "take? Compute it in code if you like.", grade=_matmul_flops, example="123456"),
        Question("What must change in a PyTorch program to run the same model on a GPU instead of the CPU?", (
            O("Rewrite the layers as CUDA kernels.",
              "no: PyTorch already calls cuBLAS and cuDNN on a GPU (oneDNN on a CPU) for you"),
            O("Move the model and its data with `.to(device)`.",
              "the same code runs anywhere: only where the tensors live changes"),
            O("Nothing: PyTorch uses a GPU by itself whenever there is one.",
              "no: tensors are created on the CPU and stay there until you move them with `.to(device)`"),
        ), answer="b"),
    ),
    "02": (
        Question("On a laptop with no NVIDIA GPU, what does `torch.cuda.is_available()` do?", (
            O("It raises an error because CUDA is missing.", "no: it never raises; it answers False"),
            O("It returns False, and `torch.cuda.device_count()` returns 0.",
              "no GPU is not an error: your code asks, and falls back to the CPU"),
            O("It returns True when the torch build includes CUDA.",
              "no: a CUDA build still answers False when there is no usable NVIDIA GPU and driver"),
        ), answer="b"),
        Question("`nvidia-smi` is not found on a MacBook. What does that mean?", (
            O("PyTorch was installed wrongly.", "no: nvidia-smi comes with NVIDIA's driver, not with PyTorch"),
            O("Nothing is wrong: this machine has no NVIDIA driver.",
              "nvidia-smi exists only where NVIDIA's driver is installed; a Mac uses MPS instead"),
            O("CUDA must be installed before the course.",
              "no: every notebook runs without CUDA, on the CPU or on Apple's MPS"),
        ), answer="b"),
        Question("A notebook has already used CUDA. A cell then sets `os.environ['CUDA_VISIBLE_DEVICES'] = '1'`. "
                 "Which GPUs does this notebook see afterwards?", (
            O("Only GPU 1, now called `cuda:0`.",
              "not in this process: a NEW process started with the variable set would see only GPU 1, as cuda:0"),
            O("The same GPUs as before.",
              "CUDA reads the variable when the process starts using it: set it before, or in a fresh process"),
            O("No GPU at all.", "no: the variable is read when CUDA starts, and here CUDA has already started"),
        ), answer="b"),
    ),
    "03": (
        Question("`x.to(device)` stands on a line of its own; its result is not assigned. What happens?", (
            O("x moves to the device.", "no: Tensor.to returns a new tensor and leaves x where it was"),
            O("A copy is made on the device and thrown away; x stays where it was.",
              "so always write `x = x.to(device)`"),
            O("An error is raised.", "no: it runs without a word, which is why the mistake is so common"),
        ), answer="b"),
        Question("And `model.to(device)` on a line of its own?", (
            O("It moves the model's parameters in place and returns the same model.",
              "nn.Module.to changes the module itself, so the line is enough"),
            O("It returns a moved copy; the model stays where it was.",
              "no: that is what a tensor does; a module moves its own parameters"),
            O("It moves the first layer only.", "no: it moves every parameter and buffer of every submodule"),
        ), answer="a"),
        Question("On a GPU, `start = time.perf_counter(); c = a @ a; t = time.perf_counter() - start` measures:", (
            O("the time of the multiplication.",
              "no: GPU work is asynchronous; the line returns once the work is queued"),
            O("only the time to queue the work: synchronize before reading the clock.",
              "wait for the device (`torch.cuda.synchronize()`), warm up, repeat: torch.utils.benchmark does it all"),
            O("the time to copy `a` to the GPU.", "no: `a` is already on the GPU, nothing is copied"),
        ), answer="b"),
    ),
    "04": (
        Question("A batch of 22 rows goes to `nn.DataParallel` on 4 GPUs. How many rows does each GPU get? "
                 "Answer with a list, one entry per GPU that gets rows.",
                 grade=lambda answer: check_replica_sizes(answer, batch_size=22, n_gpus=4), example="[1, 2, 3]"),
        Question("DataParallel splits a batch unevenly over 3 GPUs. The gradients it produces are:", (
            O("those of one model on the whole batch, up to float rounding.",
              "the loss is taken over the gathered output and the replicas' gradients are summed into the model"),
            O("slightly wrong, because the chunks differ in size.",
              "no: the split changes where the arithmetic happens, not the result"),
            O("the average of three different models.",
              "no: there is one model; the replicas are copies made for each forward pass"),
        ), answer="a"),
        Question("Loading `dp.state_dict()` of an `nn.DataParallel` model into a plain `Net1` fails. Why?", (
            O("Every key starts with `module.`: save `dp.module.state_dict()` instead.",
              "the wrapper keeps your model as `dp.module`, so its keys gain a prefix"),
            O("The weights are still on the GPU.", "no: it fails on a CPU too; the key names differ"),
            O("DataParallel changes the shapes of the weights.", "no: the shapes are the same; only the names change"),
        ), answer="a"),
    ),
    "05": (
        Question("Why can the code a DDP rank runs not be a function typed into a notebook cell?", (
            O("Each rank is a new Python process that imports its code, and a function typed into the kernel "
              "cannot be imported.",
              "so the rank's code lives in a script or a module (here gpulab/distributed/ddp_worker.py), started by torchrun"),
            O("Notebooks cannot use the gloo backend.",
              "no: the problem is new processes finding the code, not the backend"),
            O("DDP only works on GPUs.", "no: with gloo, DDP runs on CPU processes, as in this notebook"),
        ), answer="a"),
        Question("This project's `--batch-size` is the GLOBAL batch. A run with 3 ranks and `--batch-size 96`: how "
                 "many rows does each rank take in one step?", grade=_rows_per_rank, example="10"),
        Question("A rank is killed mid-training and `torchrun --max-restarts 1` restarts the group. What makes the "
                 "finished run end with the same weights as an uninterrupted one?", (
            O("Epoch checkpoints (model, optimizer, epoch) written atomically, and a data order that depends only "
              "on the seed and the epoch.", "the restarted ranks load the last checkpoint and take the same steps"),
            O("torchrun keeps the weights in memory while it restarts the ranks.",
              "no: a restart starts new processes; only what was saved to disk survives"),
            O("Nothing: a restarted run always ends with different weights.",
              "no: the notebook compares both runs, weight by weight"),
        ), answer="a"),
    ),
    "06": (
        Question("Which mean and std should scale the TEST features?", (
            O("The training rows' mean and std.", "the test rows stand for future data, which the model cannot see"),
            O("The test rows' own mean and std.", "no: that lets information from the test rows leak into the inputs"),
            O("The mean and std of all the rows.", "no: the test rows would still shape the scaling, a smaller leak"),
        ), answer="a"),
        Question("Two models' test RMSE on one 80/20 split of the 506 rows differ a little. What should come before "
                 "calling one better?", (
            O("Nothing: the lower RMSE wins.", "no: on so few rows one split is noisy; the same model's RMSE moves "
                                               "from split to split"),
            O("Repeat over several splits, all models on the same rows, and compare them split by split (paired).",
              "then a difference can be told apart from the noise of one split, or shown not to be"),
            O("Train for more epochs.", "no: more training does not remove the noise of one split"),
        ), answer="b"),
        Question("Why did scikit-learn remove `load_boston`?", (
            O("Its `B` column encodes a racist assumption, and the study behind the data was weak.",
              "which is why the case study measures the models with and without B"),
            O("The file became too large to ship.", "no: it has 506 rows; this project ships it inside the package"),
            O("Neural networks cannot learn from it.", "no: several models learn from it here; the problem is what it "
                                                       "encodes"),
        ), answer="a"),
    ),
    "07": (
        Question("Does DataParallel or DDP need an even number of GPUs to train correctly?", (
            O("No: any count gives the full-batch gradients; pick a batch size that splits well over your GPUs.",
              "odd counts only make the chunks differ by a row"),
            O("Yes: with an odd count the gradients are wrong.",
              "no: summed chunk gradients (and DDP's share-weighted average) equal the full batch for any count"),
            O("Only DDP needs it.", "no: DDP with 3 ranks trained the same weights as one process"),
        ), answer="a"),
        Question("Computing in float16, a gradient of 1e-8 becomes 0. What keeps it, still in float16?", (
            O("A loss scaler (`torch.amp.GradScaler`): scale the loss up before backward, unscale the gradients "
              "before the step.", "small gradients are scaled into float16's range, then divided back in float32"),
            O("More GPUs.", "no: 1e-8 is below float16's range on any number of GPUs"),
            O("Casting the weights to float16 too.",
              "no: that changes nothing about what float16 can hold; autocast keeps the weights in float32"),
        ), answer="a"),
        Question("`DistributedSampler` (with `drop_last=False`) shards a dataset of 21 samples over 4 ranks. How many "
                 "samples does it repeat per epoch?", grade=_sampler_padding, example="5"),
    ),
}
# The going-further notebooks keep their questions beside their exercise checks.
QUESTIONS["08"] = sharding.QUESTIONS_08
QUESTIONS["09"] = collectives.QUESTIONS_09
QUESTIONS["10"] = failures.QUESTIONS_10
QUESTIONS["11"] = roofline_checks.QUESTIONS_11
