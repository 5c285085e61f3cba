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
//                        through (the all_reduce then runs on the streams
//                        mode's stand-in device: reported, not judged).
//   driver streams       the stream order the patch adds, on a stand-in device
//                        (namespace lazy): first the CPU collectives with the
//                        stand-in registered ("rank R: cpu stand-in calls N":
//                        the waits touch no device for CPU tensors), then
//                        all_reduce, broadcast, all_gather, gather and scatter
//                        of "CUDA" tensors whose kernels run only when a stream
//                        is waited for ("rank R: device <op> ok|WRONG ...").
//                        TORCHMPI_LAZY_IGNORE=event|stream|all makes the
//                        stand-in ignore that kind of wait: the control that
//                        shows each wait is what makes the results right.
//   driver future        Work::getFuture() of device collectives, as DDP's comm
//                        hooks use it, on the stand-in device: an all_gather's
//                        future waited for ("rank R: device future
//                        all_gather[i] ok|WRONG"), then a callback chained with
//                        then() while rank 0's all_reduce is still in MPI (rank 1
//                        comes a second late), whose device copy the child
//                        future's wait must order before the caller's stream
//                        reads it ("rank R: device future then ok|WRONG").
#include TORCHMPI_PG_SOURCE

#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>


// A stand-in for a GPU runtime whose streams are queues that run only when
// waited for: what a CUDA stream is to the host (kernels are launched, not
// run), made observable on a CPU-only host.  It registers as c10's device
// guard for DeviceType::CUDA (the interface c10_cuda's CUDAGuardImpl
// implements: c10/core/impl/DeviceGuardImplInterface.h) and as the CUDA
// kernels of the four ATen operators ProcessGroupMPI's worker uses on device
// tensors (empty, as_strided for indexing, copy_).  Memory is host memory
// labelled cuda:0, so MPI moves it as a CUDA-aware MPI would move device
// memory.  Registered at run time, in the streams mode only.
namespace lazy {

struct Queue {
  std::deque<std::function<void()>> pending;
  long queued = 0;
  long done = 0;
};
struct Mark {
  c10::StreamId stream = 0;
  long upto = 0;
};

std::mutex mutex;
std::map<c10::StreamId, Queue> queues;
thread_local c10::StreamId current = 0;
std::atomic<long> calls{0}, records{0}, event_waits{0}, stream_waits{0};
std::string ignore;  // "event", "stream" or "all": waits of that kind do nothing

void launch(std::function<void()> kernel) {
  std::lock_guard<std::mutex> lock(mutex);
  Queue& queue = queues[current];
  queue.pending.push_back(std::move(kernel));
  ++queue.queued;
}

void drain(c10::StreamId id, long upto) {
  for (;;) {
    std::function<void()> kernel;
    {
      std::lock_guard<std::mutex> lock(mutex);
      Queue& queue = queues[id];
      if (queue.done >= upto || queue.pending.empty()) return;
      kernel = std::move(queue.pending.front());
      queue.pending.pop_front();
    }
    kernel();
    std::lock_guard<std::mutex> lock(mutex);
    ++queues[id].done;
  }
}

struct GuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return c10::DeviceType::CUDA; }
  c10::Device exchangeDevice(c10::Device) const override { ++calls; return dev(); }
  c10::Device getDevice() const override { ++calls; return dev(); }
  void setDevice(c10::Device) const override { ++calls; }
  void uncheckedSetDevice(c10::Device) const noexcept override { ++calls; }
  c10::Stream getStream(c10::Device device) const noexcept override {
    ++calls;
    return c10::Stream(c10::Stream::UNSAFE, device, current);
  }
  c10::Stream getDefaultStream(c10::Device device) const override {
    ++calls;
    return c10::Stream(c10::Stream::UNSAFE, device, 0);
  }
  c10::Stream exchangeStream(c10::Stream stream) const noexcept override {
    ++calls;
    c10::Stream old(c10::Stream::UNSAFE, stream.device(), current);
    current = stream.id();
    return old;
  }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
  // A stream of its own per call, as CUDA's pool hands out (a device-aware
  // Future runs its callbacks on such streams).
  c10::Stream getStreamFromGlobalPool(c10::Device device, bool) const override {
    ++calls;
    static std::atomic<c10::StreamId> next{100};
    return c10::Stream(c10::Stream::UNSAFE, device, next++);
  }
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex,
              const c10::EventFlag) const override {
    ++calls;
    ++records;
    if (*event == nullptr) *event = new Mark();
    std::lock_guard<std::mutex> lock(mutex);
    *static_cast<Mark*>(*event) = Mark{stream.id(), queues[stream.id()].queued};
  }
  void block(void* event, const c10::Stream&) const override {
    ++calls;
    synchronizeEvent(event);  // eager: the stand-in's streams wait on the host
  }
  bool queryEvent(void* event) const override {
    ++calls;
    if (event == nullptr) return true;
    std::lock_guard<std::mutex> lock(mutex);
    const Mark& mark = *static_cast<Mark*>(event);
    return queues[mark.stream].done >= mark.upto;
  }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    delete static_cast<Mark*>(event);
  }
  bool queryStream(const c10::Stream& stream) const override {
    ++calls;
    std::lock_guard<std::mutex> lock(mutex);
    return queues[stream.id()].pending.empty();
  }
  void synchronizeStream(const c10::Stream& stream) const override {
    ++calls;
    ++stream_waits;
    if (ignore != "stream" && ignore != "all") drain(stream.id(), LONG_MAX);
  }
  void synchronizeEvent(void* event) const override {
    ++calls;
    ++event_waits;
    if (event == nullptr || ignore == "event" || ignore == "all") return;
    const Mark mark = *static_cast<Mark*>(event);
    drain(mark.stream, mark.upto);
  }

 private:
  static c10::Device dev() { return c10::Device(c10::DeviceType::CUDA, 0); }
};

// A contiguous tensor on the stand-in device: zero-filled host memory.
at::Tensor empty(c10::IntArrayRef sizes, caffe2::TypeMeta dtype) {
  int64_t numel = 1;
  for (int64_t size : sizes) numel *= size;
  const size_t bytes = static_cast<size_t>(numel) * dtype.itemsize();
  void* data = std::calloc(bytes > 0 ? bytes : 1, 1);
  c10::Storage storage(c10::Storage::use_byte_size_t(), bytes,
                       c10::DataPtr(data, data, &std::free, c10::Device(c10::DeviceType::CUDA, 0)),
                       /*allocator=*/nullptr, /*resizable=*/false);
  auto impl = c10::make_intrusive<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::CUDA), dtype);
  impl->set_sizes_contiguous(sizes);
  return at::Tensor(std::move(impl));
}

at::Tensor empty_kernel(c10::SymIntArrayRef size, std::optional<at::ScalarType> dtype,
                        std::optional<at::Layout>, std::optional<at::Device>, std::optional<bool>,
                        std::optional<at::MemoryFormat>) {
  return empty(C10_AS_INTARRAYREF_SLOW(size),
               c10::scalarTypeToTypeMeta(dtype.value_or(at::kFloat)));
}

at::Tensor as_strided_kernel(const at::Tensor& self, c10::SymIntArrayRef size,
                             c10::SymIntArrayRef stride, std::optional<c10::SymInt> offset) {
  std::optional<int64_t> start;
  if (offset) start = offset->expect_int();
  return at::native::as_strided_tensorimpl(self, C10_AS_INTARRAYREF_SLOW(size),
                                           C10_AS_INTARRAYREF_SLOW(stride), start);
}

// copy_ is launched on the current stream, as a device copy is.
at::Tensor& copy_kernel(at::Tensor& self, const at::Tensor& src, bool) {
  TORCH_CHECK(self.is_contiguous() && src.is_contiguous() && self.nbytes() == src.nbytes(),
              "lazy stand-in: copy_ of contiguous tensors of one size only");
  at::Tensor dst = self;
  at::Tensor from = src;
  launch([dst, from]() mutable { std::memcpy(dst.data_ptr(), from.data_ptr(), dst.nbytes()); });
  return self;
}

void install() {
  static GuardImpl impl;
  static c10::impl::DeviceGuardImplRegistrar registrar(c10::DeviceType::CUDA, &impl);
  static torch::Library kernels(torch::Library::IMPL, "aten", c10::DispatchKey::CUDA,
                                __FILE__, __LINE__);
  kernels.impl("empty.memory_format", TORCH_FN(empty_kernel));
  kernels.impl("as_strided", TORCH_FN(as_strided_kernel));
  kernels.impl("copy_", TORCH_FN(copy_kernel));
  const char* what = std::getenv("TORCHMPI_LAZY_IGNORE");
  ignore = what != nullptr ? what : "";
}

}  // namespace lazy

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
  // A torch with a GPU has its device guard registered (the patch's waits use
  // it at enqueue); the stand-in plays that part here.
  lazy::install();
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
    work->wait();  // on the stand-in device (reported only)
    std::printf("rank %d: cuda all_reduce completed\n", rank);
  } catch (const std::exception& error) {
    std::string msg = error.what();
    std::printf("rank %d: cuda all_reduce then failed: %s\n", rank,
                msg.substr(0, msg.find('\n')).c_str());
  }
}


// A stand-in device tensor of n floats holding `before` now and `after` once
// the caller's current stream runs the fill it launches here (a kernel still
// queued when the collective is called).
at::Tensor filled_later(float before, float after, int64_t n) {
  at::Tensor tensor = lazy::empty({n}, caffe2::TypeMeta::Make<float>());
  std::fill_n(tensor.data_ptr<float>(), n, before);
  lazy::launch([tensor, after]() mutable {
    std::fill_n(tensor.data_ptr<float>(), tensor.numel(), after);
  });
  return tensor;
}

// Reads the host memory under a stand-in device tensor, as the caller would
// after Work::wait() and a copy to the host.
void judge(int rank, const char* op, const at::Tensor& got, float want) {
  const float* data = got.data_ptr<float>();
  for (int64_t i = 0; i < got.numel(); ++i) {
    if (data[i] != want) {
      std::printf("rank %d: device %s WRONG: element %lld is %g, want %g\n", rank, op,
                  static_cast<long long>(i), data[i], want);
      return;
    }
  }
  std::printf("rank %d: device %s ok\n", rank, op);
}

void streams(c10d::ProcessGroupMPI& pg) {
  const int rank = pg.getRank();
  const int size = pg.getSize();
  lazy::install();
  collectives(pg);
  std::printf("rank %d: cpu stand-in calls %ld\n", rank, lazy::calls.load());

  // The caller works on a stream of its own (as torch.cuda.stream(s) does);
  // the worker thread is on the default stream, 0.
  lazy::current = 1;
  const float pending = -7;  // what MPI sees if it runs before the caller's kernels

  std::vector<at::Tensor> reduced{filled_later(pending, rank + 1, 4)};
  try {
    pg.allreduce(reduced)->wait();
  } catch (const c10::Error& error) {  // an MPI the check finds not CUDA-aware
    std::printf("rank %d: device rejected: %s\n", rank, error.what_without_backtrace());
    return;
  }
  judge(rank, "all_reduce", reduced[0], size * (size + 1) / 2);

  std::vector<at::Tensor> bcast{filled_later(pending, rank == 0 ? 42 : -1, 4)};
  c10d::BroadcastOptions bopts;
  bopts.rootRank = 0;
  pg.broadcast(bcast, bopts)->wait();
  judge(rank, "broadcast", bcast[0], 42);

  std::vector<at::Tensor> mine{filled_later(pending, 10 + rank, 3)};
  std::vector<std::vector<at::Tensor>> gathered(1);
  for (int i = 0; i < size; ++i) gathered[0].push_back(filled_later(-1, -1, 3));
  pg.allgather(gathered, mine)->wait();
  for (int i = 0; i < size; ++i) {
    judge(rank, ("all_gather[" + std::to_string(i) + "]").c_str(), gathered[0][i], 10 + i);
  }

  std::vector<at::Tensor> contribution{filled_later(pending, 20 + rank, 2)};
  std::vector<std::vector<at::Tensor>> at_root;
  if (rank == 0) {
    at_root.resize(1);
    for (int i = 0; i < size; ++i) at_root[0].push_back(filled_later(-1, -1, 2));
  }
  c10d::GatherOptions gopts;
  gopts.rootRank = 0;
  pg.gather(at_root, contribution, gopts)->wait();
  for (int i = 0; rank == 0 && i < size; ++i) {
    judge(rank, ("gather[" + std::to_string(i) + "]").c_str(), at_root[0][i], 20 + i);
  }

  std::vector<at::Tensor> received{filled_later(-1, -1, 5)};
  std::vector<std::vector<at::Tensor>> to_send;
  if (rank == 0) {
    to_send.resize(1);
    for (int i = 0; i < size; ++i) to_send[0].push_back(filled_later(pending, 30 + i, 5));
  }
  c10d::ScatterOptions sopts;
  sopts.rootRank = 0;
  pg.scatter(received, to_send, sopts)->wait();
  judge(rank, "scatter", received[0], 30 + rank);

  pg.barrier()->wait();
  std::printf("rank %d: waits: %ld recorded, %ld on events, %ld on streams\n", rank,
              lazy::records.load(), lazy::event_waits.load(), lazy::stream_waits.load());
}

// A stand-in device tensor of n floats holding `value` now (no kernel pending).
at::Tensor device_full(float value, int64_t n) {
  at::Tensor tensor = lazy::empty({n}, caffe2::TypeMeta::Make<float>());
  std::fill_n(tensor.data_ptr<float>(), n, value);
  return tensor;
}

void future(c10d::ProcessGroupMPI& pg) {
  const int rank = pg.getRank();
  const int size = pg.getSize();
  lazy::install();
  lazy::current = 1;  // the caller's stream, as in streams()

  // The future's value is the outputs, complete once the future is.
  std::vector<at::Tensor> mine{device_full(10 + rank, 3)};
  std::vector<std::vector<at::Tensor>> gathered(1);
  for (int i = 0; i < size; ++i) gathered[0].push_back(device_full(-1, 3));
  c10::intrusive_ptr<c10::ivalue::Future> fut;
  try {
    fut = pg.allgather(gathered, mine)->getFuture();
    fut->wait();
  } catch (const std::exception& error) {
    std::string msg = error.what();
    std::printf("rank %d: device future failed: %s\n", rank,
                msg.substr(0, msg.find('\n')).c_str());
    return;
  }
  if (fut->hasError()) {
    std::printf("rank %d: device future error: %s\n", rank, fut->tryRetrieveErrorMessage().c_str());
    return;
  }
  std::vector<at::Tensor> values = fut->value().toTensorVector();
  lazy::drain(1, LONG_MAX);  // the caller's stream reads the values (a copy to the host)
  for (int i = 0; i < size && i < static_cast<int>(values.size()); ++i) {
    judge(rank, ("future all_gather[" + std::to_string(i) + "]").c_str(), values[i], 10 + i);
  }

  // A comm hook's shape: a device op chained on the future, used by the caller
  // after the child future's wait.  Rank 1 comes late, so rank 0's then() is
  // chained while its all_reduce is still in MPI: the callback runs on the
  // worker thread when the work completes.
  if (rank == 1) std::this_thread::sleep_for(std::chrono::seconds(1));
  std::vector<at::Tensor> reduced{device_full(rank + 1, 4)};
  auto child = pg.allreduce(reduced)->getFuture()->then(
      [](c10::ivalue::Future& parent) {
        at::Tensor sum = parent.value().toTensorVector()[0];
        at::Tensor copy = lazy::empty({sum.numel()}, sum.dtype());
        copy.copy_(sum);  // launched on the current stream of the thread that runs this
        return c10::IValue(copy);
      },
      c10::TensorType::get());
  child->wait();
  if (child->hasError()) {
    std::printf("rank %d: device future then error: %s\n", rank,
                child->tryRetrieveErrorMessage().c_str());
    return;
  }
  at::Tensor got = child->value().toTensor();
  lazy::drain(1, LONG_MAX);  // the caller's stream reads it
  judge(rank, "future then", got, size * (size + 1) / 2);
  pg.barrier()->wait();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc == 2 ? argv[1] : "";
  if (mode != "collectives" && mode != "cuda" && mode != "streams" && mode != "future") {
    std::fprintf(stderr, "usage: %s collectives|cuda|streams|future\n", argv[0]);
    return 2;
  }
  auto pg = c10d::ProcessGroupMPI::createProcessGroupMPI({});
  if (mode == "collectives") {
    collectives(*pg);
  } else if (mode == "cuda") {
    cuda(*pg);
  } else if (mode == "future") {
    future(*pg);
  } else {
    streams(*pg);
  }
  pg.reset();  // joins the worker thread; MPI_Finalize runs at exit (atexit in the .cpp)
  std::fflush(stdout);
  return failures == 0 ? 0 : 1;
}
