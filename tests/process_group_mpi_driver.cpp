// Driver for tests/test_process_group_mpi_build.py: runs upstream PyTorch's
// c10d::ProcessGroupMPI (torch/csrc/distributed/c10d/ProcessGroupMPI.cpp of a
// release, with torchmpi's patch applied) under mpirun, linked to that
// release's libtorch_cpu/libc10.  No Python and no torch import: only the C++
// API that torch.distributed's MPI backend calls.
//
// The test compiles this file with -DTORCHMPI_PG_SOURCE="<patched .cpp>": the
// patched file is #included here, so one compiler run per MPI builds both.
//
//   driver collectives   all_reduce, broadcast, all_gather, gather, scatter on
//                        CPU tensors; prints "rank R: <op> ok" per collective
//                        and exits non-zero on the first wrong element.
//   driver cuda          an all_reduce of a tensor whose device is CUDA (see
//                        cuda_tensor()); prints "rank R: cuda rejected: <msg>"
//                        when ProcessGroupMPI refuses it in its own argument
//                        check, "rank R: cuda accepted" when that check lets it
//                        through (what happens next needs a GPU: reported, not
//                        judged).
#include TORCHMPI_PG_SOURCE

#include <ATen/ATen.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

int failures = 0;

void expect(int rank, const char* op, const at::Tensor& got, const at::Tensor& want) {
  if (!at::equal(got, want)) {
    std::printf("rank %d: %s WRONG: got %s want %s\n", rank, op,
                got.toString().c_str(), want.toString().c_str());
    ++failures;
  }
}

at::Tensor filled(double value, int64_t n = 4) {
  return at::full({n}, value, at::kFloat);
}

void collectives(c10d::ProcessGroupMPI& pg) {
  const int rank = pg.getRank();
  const int size = pg.getSize();

  std::vector<at::Tensor> reduced{filled(rank + 1)};
  pg.allreduce(reduced)->wait();
  expect(rank, "all_reduce", reduced[0], filled(size * (size + 1) / 2));
  std::printf("rank %d: all_reduce ok\n", rank);

  std::vector<at::Tensor> bcast{rank == 0 ? at::arange(4, at::kFloat) : filled(-1)};
  c10d::BroadcastOptions bopts;
  bopts.rootRank = 0;
  pg.broadcast(bcast, bopts)->wait();
  expect(rank, "broadcast", bcast[0], at::arange(4, at::kFloat));
  std::printf("rank %d: broadcast ok\n", rank);

  std::vector<at::Tensor> mine{filled(rank, 3)};
  std::vector<std::vector<at::Tensor>> gathered(1);
  for (int i = 0; i < size; ++i) gathered[0].push_back(filled(-1, 3));
  pg.allgather(gathered, mine)->wait();
  for (int i = 0; i < size; ++i) expect(rank, "all_gather", gathered[0][i], filled(i, 3));
  std::printf("rank %d: all_gather ok\n", rank);

  std::vector<at::Tensor> contribution{filled(10 * rank + 1, 2)};
  std::vector<std::vector<at::Tensor>> at_root;
  if (rank == 0) {
    at_root.resize(1);
    for (int i = 0; i < size; ++i) at_root[0].push_back(filled(-1, 2));
  }
  c10d::GatherOptions gopts;
  gopts.rootRank = 0;
  pg.gather(at_root, contribution, gopts)->wait();
  if (rank == 0) {
    for (int i = 0; i < size; ++i) expect(rank, "gather", at_root[0][i], filled(10 * i + 1, 2));
  }
  std::printf("rank %d: gather ok\n", rank);

  std::vector<at::Tensor> received{filled(-1, 5)};
  std::vector<std::vector<at::Tensor>> to_send;
  if (rank == 0) {
    to_send.resize(1);
    for (int i = 0; i < size; ++i) to_send[0].push_back(filled(100 + i, 5));
  }
  c10d::ScatterOptions sopts;
  sopts.rootRank = 0;
  pg.scatter(received, to_send, sopts)->wait();
  expect(rank, "scatter", received[0], filled(100 + rank, 5));
  std::printf("rank %d: scatter ok\n", rank);

  pg.barrier()->wait();
}

// A tensor whose device is CUDA, built without a GPU or libtorch_cuda: a
// c10::TensorImpl over a Storage whose DataPtr says cuda:0 (host memory
// underneath), with the CUDA dispatch key -- what ATen's CUDA allocator would
// hand back, minus the allocation.  tensor.is_cuda() is true, the one property
// ProcessGroupMPI's checkSingleTensorHelper() reads before it asks
// cudaAwareMpiCheck().  (at::from_blob with a CUDA device does not do: it
// initialises the CUDA hooks, absent from libtorch_cpu.)  Nothing reads the
// data unless that check lets the tensor through.
at::Tensor cuda_tensor(std::vector<float>& host) {
  const at::Device device(at::kCUDA, 0);
  c10::Storage storage(c10::Storage::use_byte_size_t(), host.size() * sizeof(float),
                       c10::DataPtr(host.data(), device), /*allocator=*/nullptr,
                       /*resizable=*/false);
  auto impl = c10::make_intrusive<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::CUDA),
      caffe2::TypeMeta::Make<float>());
  impl->set_sizes_contiguous({static_cast<int64_t>(host.size())});
  return at::Tensor(std::move(impl));
}

void cuda(c10d::ProcessGroupMPI& pg) {
  const int rank = pg.getRank();
  std::vector<float> host(4, 1.0F);
  std::vector<at::Tensor> tensors{cuda_tensor(host)};
  if (!tensors[0].is_cuda()) {
    std::printf("rank %d: stand-in is not a CUDA tensor\n", rank);
    ++failures;
    return;
  }
  c10::intrusive_ptr<c10d::Work> work;
  try {
    work = pg.allreduce(tensors);
  } catch (const c10::Error& error) {
    std::string msg = error.what_without_backtrace();
    std::printf("rank %d: cuda rejected: %s\n", rank, msg.c_str());
    return;
  }
  std::printf("rank %d: cuda accepted\n", rank);
  try {
    work->wait();  // on a CPU-only libtorch: no CUDA device guard (reported only)
    std::printf("rank %d: cuda all_reduce completed\n", rank);
  } catch (const std::exception& error) {
    std::string msg = error.what();
    std::printf("rank %d: cuda all_reduce then failed: %s\n", rank,
                msg.substr(0, msg.find('\n')).c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 || (std::strcmp(argv[1], "collectives") != 0 && std::strcmp(argv[1], "cuda") != 0)) {
    std::fprintf(stderr, "usage: %s collectives|cuda\n", argv[0]);
    return 2;
  }
  auto pg = c10d::ProcessGroupMPI::createProcessGroupMPI({});
  if (std::strcmp(argv[1], "collectives") == 0) {
    collectives(*pg);
  } else {
    cuda(*pg);
  }
  pg.reset();  // joins the worker thread; MPI_Finalize runs at exit (atexit in the .cpp)
  std::fflush(stdout);
  return failures == 0 ? 0 : 1;
}
