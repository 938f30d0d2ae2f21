//===- Executor.h - runs one rank's programs --------------------*- C++ -*-===//
//
// Part of mlt. An Executor is one rank of a plan brought to life: its arena
// (one allocation of the plan's arena size, every buffer at its offset), its
// device context, and its programs with every operand resolved to an address,
// so that running a program is a loop of launches with no lookups. The host
// reads and writes buffers by index (find them by name once); values are
// converted between the host's float and the buffer's element type.
//
// Mixed-precision plans hold compute copies of the parameters
// (ParameterCopy buffers). The executor keeps them equal to the parameters:
// once the host writes a Parameter buffer, the next program run is preceded
// by the plan's refresh_parameter_copies program (PlanFormat.h).
//
// For N ranks, a process creates N executors over one Backend, one per
// thread (RankGroup.h does this); collectives reach the other ranks through
// the communicator that the device context holds.
//
// Transfers. The step's transfer groups (Kernels.def's "Transfers": maximal
// runs of consecutive calls of transfer programs) run as one exchange each:
// the executor gathers the sends and receives of the group's calls, in
// order, each with its buffer at the copy its call's micro-batch and slot
// select and its peer as an index in the rank's group on its axis, and
// hands them to the device context's `exchange` at once (the communicator
// then posts them together). A transfer program run alone (`run`) is a
// group of its own.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_EXECUTOR_H
#define MLT_RUNTIME_EXECUTOR_H

#include "mlt/Plan/Plan.h"
#include "mlt/Runtime/exec/Backend.h"
#include "mlt/Runtime/exec/Position.h"
#include "mlt/Support/Status.h"

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mlt::rt {

class Executor {
public:
  /// Verifies rank `rankIndex` of `plan` (verifyRank against the plan's mesh,
  /// and the backend's checkSupported), creates its device context on
  /// `backend`, allocates and zeroes its arena, and fills its Constant
  /// buffers. `communicator` is the rank's side of the collectives: needed
  /// when the rank launches any, or a kernel that reads its coordinate on a
  /// mesh axis, or any send or receive, and then over the plan's mesh as rank
  /// `rankIndex`. `backend`
  /// and `communicator` must outlive the executor; the plan need not (the
  /// executor keeps its rank's part).
  static StatusOr<std::unique_ptr<Executor>>
  create(const Plan &plan, uint32_t rankIndex, Backend &backend,
         Communicator *communicator = nullptr);

  ~Executor();
  Executor(const Executor &) = delete;
  Executor &operator=(const Executor &) = delete;

  const RankPlan &rankPlan() const { return rank_; }
  const BufferDesc &buffer(size_t index) const { return rank_.buffers[index]; }
  Backend &backend() const { return backend_; }
  DeviceContext &device() const { return *device_; }

  /// The index of the buffer named `name`; fails naming it when absent.
  StatusOr<size_t> findBuffer(std::string_view name) const;
  /// The index of the program named `name`; fails naming it when absent.
  StatusOr<size_t> findProgram(std::string_view name) const;

  /// Runs the plan's training step: its calls in order, each program with
  /// the copies of its call's micro-batch, each transfer group as one
  /// exchange (see "Transfers" above), after refreshing the compute
  /// copies if the host wrote parameters since the last run; with `wait`, to
  /// completion (synchronizing the device), else only queued. A failing
  /// launch is reported with the call, the program, the instruction and its
  /// kernel. On a device that captures, the whole step becomes one graph on
  /// its second run, replayed from then on.
  Status runStep(bool wait = true);

  /// Whether the last runStep set the device up rather than only trained:
  /// the first run on a device that queues (libraries' plans, scratch
  /// memory) or the run captured as a graph. Its time is not the pace of
  /// training (the run summary leaves it out).
  bool stepWasSetUp() const { return stepReplay_.lastRunSetUp; }

  /// Runs the plan's evaluation step (every micro-batch's forward pass and
  /// loss, Plan.fbs's `eval_step`) as runStep runs the training step; it
  /// writes the copies of "loss" and no training state. It runs between
  /// training steps; the position records its launches only inside a
  /// StepScope of an evaluation (as Trainer::evaluate places it, so that
  /// the hang watchdog times it), and otherwise stays outside. Fails when
  /// the plan has none.
  Status runEvalStep(bool wait = true);

  /// Runs program `index` alone, as a call without a micro-batch (tests,
  /// and refresh_parameter_copies; a transfer program as a group of its
  /// own); otherwise as runStep.
  Status run(size_t programIndex, bool wait = true);
  Status run(std::string_view programName);

  /// Waits for the queued work, and completes the reads of
  /// readScalarAtSync.
  Status synchronize();

  /// Reads a one-element float buffer (its copy `copy`) without waiting:
  /// `*out` is set, by the next synchronize, to the buffer's value at this
  /// point of the queued work. `out` must stay valid until then.
  Status readScalarAtSync(size_t buffer, double *out, uint32_t copy = 0);

  /// Whether programs are captured on their second run and replayed from
  /// then on, where the device can capture (CUDA graphs, unless
  /// MLT_CUDA_GRAPHS=0); on by default. The results are the same bits either
  /// way: the same kernels run on the same buffers.
  void setCapture(bool enabled) { captureEnabled_ = enabled; }

  /// Copies `bytes` raw bytes to or from copy `copy` of a buffer (the
  /// micro-batch's, for buffers with a copy per micro-batch); `bytes` must
  /// equal its size.
  Status writeRaw(size_t buffer, const void *data, uint64_t bytes,
                  uint32_t copy = 0);
  Status readRaw(size_t buffer, void *data, uint64_t bytes,
                 uint32_t copy = 0);

  /// Writes `count` floats (the buffer's element count), converted to its
  /// element type: f32, f64, or bf16 (rounded to nearest even).
  Status writeFloats(size_t buffer, const float *values, int64_t count);
  /// Reads a float buffer as floats.
  StatusOr<std::vector<float>> readFloats(size_t buffer);
  /// Reads elements [begin, begin + count) of a float buffer into `out`,
  /// as floats (straight into `out` when the buffer is f32).
  Status readFloatRange(size_t buffer, int64_t begin, int64_t count,
                        float *out);

  /// Writes or reads a one-element float buffer.
  Status writeScalar(size_t buffer, double value);
  StatusOr<double> readScalar(size_t buffer);

  /// Sets every element of every buffer of `kind` to zero (gradients before a
  /// step, optimizer states before training).
  Status zeroBuffers(BufferKind kind);

  /// Sets every Constant buffer to its value (done by create).
  Status fillConstants();

  /// Where this rank is (Position.h): the host's place, updated at every
  /// launch (a Running, Waiting or Setup one), and, once
  /// watchDevicePosition, the device's. The trainer brackets each step
  /// (StepScope); the hang watchdog reads it from another thread.
  RankPosition &position() { return position_; }
  const RankPosition &position() const { return position_; }

  /// Has the device keep its own place in position() from now on
  /// (DeviceContext::watchPosition): on CUDA, a word per plan stream that
  /// the device writes around every collective and transfer group. Only
  /// runs watched for hangs pay for it.
  Status watchDevicePosition() { return device_->watchPosition(position_); }

  /// MLT_FAULT_STALL (tests): a launch of the step, by the step's number and
  /// the launch's index among the step's launches (stepLaunchOffsets); with
  /// `evaluation`, of the evaluation step after training step `step` (of
  /// its every batch).
  struct StallPoint {
    int64_t step = 0;
    uint64_t launch = 0;
    bool evaluation = false;
  };
  /// Holds the host before the launch at `point`, as a rank stuck there
  /// would be (Stalled), until the run abandons the rank
  /// (RankPosition::abandon); the launch then fails. Turns capture off, so
  /// that every step's launches are issued one by one on this rank.
  void stallAt(StallPoint point) {
    stall_ = point;
    captureEnabled_ = false;
  }

  /// MLT_FAULT_SLOW (tests): the host sleeps `delay` before queuing each
  /// training step's launches, as a rank with slow input or a slow host
  /// would, and the other ranks wait for it.
  void delayEachStep(std::chrono::milliseconds delay) { stepDelay_ = delay; }

  /// Marks the compute copies stale, as a write of a Parameter buffer does:
  /// refresh_parameter_copies runs before the next program. For a rank the
  /// host wrote no parameter of while it wrote the other ranks' (under a
  /// partitioned optimizer a rank may hold none): its refresh all-gathers
  /// with theirs, so every rank must run it.
  void markParametersWritten() { copiesStale_ = true; }

  /// One launch of a profile: its program and instruction indices, when it
  /// started (milliseconds from the profile's first launch) and the
  /// milliseconds it took on the device. The sends and receives of a
  /// transfer group, which run as one exchange, each have the group's
  /// start and time.
  struct LaunchTime {
    size_t program = 0;
    size_t instruction = 0;
    double start = 0.0;
    double milliseconds = 0.0;
  };
  /// Programs and the step are captured (DeviceContext::beginCapture) on
  /// their second run and replayed from then on.
  /// Times every launch of the programs run from now on
  /// (DeviceContext::beginLaunchTiming) until endProfile, which returns them
  /// in launch order.
  Status beginProfile();
  StatusOr<std::vector<LaunchTime>> endProfile();

private:
  struct PreparedInstruction {
    const InstructionDesc *inst;
    /// Views of copy 0 of every operand.
    std::vector<BufferView> inputs;
    std::vector<BufferView> outputs;
    /// A send or a receive: its transfer (the buffer at copy 0, the peer's
    /// index in the rank's group on the axis), and the axis.
    PointToPoint transfer;
    size_t axis = 0;
    /// The operands of buffers with a copy per micro-batch or per slot:
    /// whether an output, the position, the bytes from one copy to the
    /// next, and whether the call's slot (else its micro-batch) picks it.
    struct Copied {
      bool output;
      uint32_t position;
      uint64_t stride;
      bool bySlot;
    };
    std::vector<Copied> copied;
  };
  /// Runs so far of a program or of the step; the capture of its launches
  /// (DeviceContext::beginCapture), made on its second run; whether
  /// capturing it failed (it then always runs launch by launch).
  struct Replay {
    size_t runs = 0;
    std::optional<size_t> capture;
    bool captureFailed = false;
    /// Whether the last run was the first on a device that queues, or the
    /// one captured (stepWasSetUp).
    bool lastRunSetUp = false;
  };
  struct PreparedProgram {
    std::string name;
    std::vector<PreparedInstruction> instructions;
    Replay replay;
    /// Whether it is a transfer program (isTransferProgram).
    bool transfers = false;
  };
  /// One call of a transfer group: its program, micro-batch and slot, and
  /// the call (its index in the step, or step.size() + the program's index
  /// for a program run alone: Position.h).
  struct TransferCall {
    size_t program;
    int32_t microbatch;
    int32_t slot;
    uint32_t call;
  };

  Executor(RankPlan rank, std::vector<MeshAxis> mesh, Backend &backend,
           std::unique_ptr<DeviceContext> device);
  BufferView view(size_t index, uint32_t copy = 0) const;
  /// Resolves every operand; `coordinates` are the rank's on the mesh
  /// (empty without one), which place the transfers' peers.
  void prepare(const std::vector<int> &coordinates);
  /// Refreshes stale compute copies (unless `program` is the refresh), then
  /// runs `launch` through `replay`'s capture as run and runStep describe.
  Status runReplayed(Replay &replay, std::optional<size_t> program,
                     const std::function<Status()> &launch, bool wait);

  RankPlan rank_;
  /// The plan's mesh (empty without one): the transfers name its axes.
  std::vector<MeshAxis> mesh_;
  Backend &backend_;
  std::unique_ptr<DeviceContext> device_;
  uint8_t *arena_ = nullptr;
  std::vector<PreparedProgram> programs_;
  /// The refresh_parameter_copies program, if the plan has one, and whether
  /// the host wrote a Parameter buffer since it last ran.
  std::optional<size_t> refreshProgram_;
  bool copiesStale_ = false;
  /// Launches the instructions of `program` one by one, as call `call`
  /// (see TransferCall), with the copies of micro-batch `microbatch` and
  /// slot `slot` (-1: none), between the device's beginProgram and
  /// endProgram (on a failure, the error names the program, the instruction
  /// and its kernel).
  Status launchAll(size_t programIndex, uint32_t call, int32_t microbatch = -1,
                   int32_t slot = -1);
  /// What the host does in a launch of `inst`: Setup in a first run or a
  /// capture on a device that queues, Waiting in a collective or transfer on
  /// one that runs launches to completion, else Running.
  RankActivity launchActivity(const InstructionDesc &inst) const;
  /// Holds the host at instruction `instruction` of call `call` while it is
  /// the stall point (stallAt), until abandoned.
  Status holdIfStalled(uint32_t call, uint32_t instruction);
  /// Times a launch of activity Waiting (a collective or transfer group on
  /// a device that runs it to completion) into position_'s wait, and sets
  /// the activity back to Running after it; a launch of another activity,
  /// or outside a tracked step, is left alone.
  class WaitTimer {
  public:
    WaitTimer(Executor &executor, RankActivity activity);
    ~WaitTimer();
    WaitTimer(const WaitTimer &) = delete;
    WaitTimer &operator=(const WaitTimer &) = delete;

  private:
    Executor *executor_;
    std::chrono::steady_clock::time_point begun_;
  };
  /// Runs the transfers of `calls`, one transfer group, as one exchange.
  Status runTransferGroup(const std::vector<TransferCall> &calls);
  /// `p`'s operands moved to the copies of micro-batch `microbatch` and
  /// slot `slot` (in `inputs` and `outputs`; p's own views where it has no
  /// operand with copies, or both are -1 or 0).
  void resolveCopies(const PreparedInstruction &p, int32_t microbatch,
                     int32_t slot, std::vector<BufferView> &inputs,
                     std::vector<BufferView> &outputs) const;
  /// Runs the calls of the step of `kind` (runStep, runEvalStep) through
  /// `replay`.
  Status runCalls(StepKind kind, Replay &replay, bool wait);
  /// Whether launches record their place in position_ (and may be held by
  /// MLT_FAULT_STALL): in training steps, and in the evaluation step where
  /// the caller placed the rank in an evaluation (runCalls).
  bool tracksPosition_ = true;
  Replay stepReplay_, evalStepReplay_;

  bool captureEnabled_ = true;
  /// Whether the device queues launches (DeviceContext::queuesLaunches),
  /// and whether the launches now issued are a first run's or a capture's.
  bool deviceQueues_ = false;
  bool setup_ = false;
  RankPosition position_;
  /// stepLaunchOffsets of the rank's training step and evaluation step.
  std::vector<uint64_t> launchOffsets_[2];
  std::optional<StallPoint> stall_;
  std::chrono::milliseconds stepDelay_{0};
  /// Reads queued by readScalarAtSync: the buffer's type, where its bytes
  /// land, and where the value goes (a deque: the landing areas do not
  /// move).
  struct PendingRead {
    ElementType dtype;
    alignas(8) unsigned char bytes[8];
    double *out;
  };
  std::deque<PendingRead> pendingReads_;
  /// While profiling: the (program, instruction) of every launch, per
  /// timed unit of the device (a launch, or an exchange: its transfers).
  bool profiling_ = false;
  std::vector<std::vector<std::pair<size_t, size_t>>> profiled_;
};

} // namespace mlt::rt

#endif // MLT_RUNTIME_EXECUTOR_H
