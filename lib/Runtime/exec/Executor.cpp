//===- Executor.cpp - runs one rank's programs ----------------------------===//
//
// Part of mlt. Creation verifies, allocates and resolves; running is a loop
// of launches, and of exchanges for the transfer groups. Host-side reads and
// writes stage through a host vector and the device context's copies, so
// the same code serves device memory later.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/exec/Executor.h"
#include "mlt/Plan/KernelInfo.h"
#include "mlt/Plan/PlanFormat.h"
#include "mlt/Runtime/comm/Communicator.h"
#include "mlt/Runtime/cpu/VectorOps.h"

#include "mlt/Support/FormatBytes.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>
#include <tuple>

using namespace mlt;
using namespace mlt::rt;

DeviceContext::~DeviceContext() = default;
Backend::~Backend() = default;

Status DeviceContext::exchange(std::string_view,
                               const std::vector<PointToPoint> &) {
  return errorf("this device cannot run sends and receives");
}

StatusOr<void *> DeviceContext::allocateHostStaging(uint64_t bytes) {
  void *memory = nullptr;
  if (bytes > SIZE_MAX ||
      posix_memalign(&memory, 4096, std::max<size_t>(size_t(bytes), 1)) != 0)
    return errorf("cannot allocate ", formatBytes(bytes), " of host memory");
  return memory;
}

void DeviceContext::freeHostStaging(void *memory) { std::free(memory); }
Status DeviceContext::watchPosition(RankPosition &) { return Status::ok(); }

Status DeviceContext::beginLaunchTiming() {
  return errorf("this device cannot time its launches");
}

StatusOr<std::vector<DeviceContext::LaunchTiming>>
DeviceContext::endLaunchTiming() {
  return errorf("this device cannot time its launches");
}

Status DeviceContext::beginCapture() {
  return errorf("this device cannot capture launches");
}

StatusOr<size_t> DeviceContext::endCapture() {
  return errorf("this device cannot capture launches");
}

Status DeviceContext::replay(size_t) {
  return errorf("this device cannot capture launches");
}

Status mlt::rt::checkComputeOperands(
    const RankPlan &rank, const InstructionDesc &inst,
    const std::function<Status(const BufferDesc &buffer)> &check) {
  const size_t numInputs = inst.inputs.size();
  const size_t numOperands = numInputs + inst.outputs.size();
  auto bufferOf = [&](size_t o) -> const BufferDesc & {
    return rank
        .buffers[o < numInputs ? inst.inputs[o] : inst.outputs[o - numInputs]];
  };
  // The compute type, which the backend checks.
  std::vector<ElementType> types;
  for (size_t o = 0; o < numOperands; ++o)
    types.push_back(bufferOf(o).dtype);
  std::optional<size_t> computed =
      computeOperandIndex(inst.kernel, numInputs, types);
  const BufferDesc *first = computed ? &bufferOf(*computed) : nullptr;
  if (first)
    MLT_RETURN_IF_ERROR(check(*first));
  const ElementType compute = first ? first->dtype : ElementType::F32;
  for (size_t o = 0; o < numOperands; ++o) {
    const BufferDesc &buffer = bufferOf(o);
    if (!isFloatElementType(buffer.dtype))
      continue;
    const OperandPrecision precision =
        operandPrecision(inst.kernel, numInputs, inst.outputs.size(), o);
    const ElementType want = precisionType(precision, compute);
    if (buffer.dtype == want ||
        (precision == OperandPrecision::Accumulator && buffer.dtype == compute))
      continue;
    switch (precision) {
    case OperandPrecision::Gradient:
      if (compute == ElementType::F32 && (buffer.dtype == ElementType::BF16 ||
                                          buffer.dtype == ElementType::F16))
        continue;
      break;
    case OperandPrecision::ComputeCopy:
      if (buffer.dtype == ElementType::F16)
        continue;
      return errorf("buffer '", buffer.name, "' is ",
                    elementTypeName(buffer.dtype),
                    ", but a compute copy is bf16 or f16");
    case OperandPrecision::FixedF32:
      return errorf("buffer '", buffer.name, "' is ",
                    elementTypeName(buffer.dtype),
                    ", but this operand is an f32 scalar");
    case OperandPrecision::Statistic:
      return errorf("buffer '", buffer.name, "' is ",
                    elementTypeName(buffer.dtype), ", but it holds ",
                    elementTypeName(want),
                    " statistics (the instruction "
                    "computes in ",
                    elementTypeName(compute), ")");
    case OperandPrecision::Compute:
    case OperandPrecision::Accumulator:
      break;
    }
    std::string also;
    if (precision == OperandPrecision::Gradient && compute == ElementType::F32)
      also = " (this gradient may also be bf16 or f16)";
    if (precision == OperandPrecision::Accumulator && want != compute)
      also = std::string(" (this gradient may also be ") +
             elementTypeName(want) + ")";
    if (!first) // every other float operand a half-precision gradient
      return errorf("buffer '", buffer.name, "' is ",
                    elementTypeName(buffer.dtype),
                    ", but the instruction computes in f32", also);
    return errorf("buffer '", buffer.name, "' is ",
                  elementTypeName(buffer.dtype), ", but buffer '", first->name,
                  "' is ", elementTypeName(compute),
                  "; an instruction computes in one float type", also);
  }
  return Status::ok();
}

Status mlt::rt::checkMeshAxis(const Mesh &mesh, int64_t axis) {
  if (axis < 0 || size_t(axis) >= mesh.numAxes())
    return errorf("axis ", axis, " is not an axis of the mesh ",
                  mesh.toString());
  return Status::ok();
}

StatusOr<AxisPosition> mlt::rt::axisPosition(const Communicator *communicator,
                                             int64_t axis) {
  if (axis == -1)
    return AxisPosition{};
  if (!communicator)
    return errorf("this rank has no communicator");
  const Mesh &mesh = communicator->mesh();
  MLT_RETURN_IF_ERROR(checkMeshAxis(mesh, axis));
  StatusOr<std::vector<int>> coordinates =
      mesh.coordinates(communicator->rank());
  if (!coordinates)
    return coordinates.takeStatus();
  return AxisPosition{(*coordinates)[axis], mesh.axes()[axis].size};
}

StatusOr<VocabShard> mlt::rt::vocabShard(const Communicator *communicator,
                                         int64_t vocabLocal, int64_t axis) {
  StatusOr<AxisPosition> position = axisPosition(communicator, axis);
  if (!position)
    return position.takeStatus();
  return VocabShard{position->coordinate * vocabLocal,
                    position->size * vocabLocal};
}

StatusOr<SequencePositions>
mlt::rt::sequencePositions(const Communicator *communicator, int64_t axis,
                           int64_t rows, int64_t offset) {
  StatusOr<AxisPosition> position = axisPosition(communicator, axis);
  if (!position)
    return position.takeStatus();
  if (axis < 0)
    return SequencePositions(offset);
  return SequencePositions::contextBlock(rows, position->coordinate,
                                         position->size, offset);
}

Executor::Executor(RankPlan rank, std::vector<MeshAxis> mesh, Backend &backend,
                   std::unique_ptr<DeviceContext> device)
    : rank_(std::move(rank)), mesh_(std::move(mesh)), backend_(backend),
      device_(std::move(device)), deviceQueues_(device_->queuesLaunches()),
      position_(rank_.rank),
      launchOffsets_{stepLaunchOffsets(rank_, StepKind::Training),
                     stepLaunchOffsets(rank_, StepKind::Evaluation)} {
  // (a device that runs launches to completion: the host's wait in a
  // collective is the rank's; Position.h's "Waiting")
  if (!deviceQueues_)
    position_.measureHostWait();
}

Executor::~Executor() {
  if (arena_) {
    (void)device_->synchronize();
    device_->deallocate(arena_);
  }
}

StatusOr<std::unique_ptr<Executor>>
Executor::create(const Plan &plan, uint32_t rankIndex, Backend &backend,
                 Communicator *communicator) {
  if (rankIndex >= plan.ranks.size())
    return errorf("the plan has no rank ", rankIndex, " (it has ",
                  plan.ranks.size(), ")");
  const RankPlan &rank = plan.ranks[rankIndex];
  MLT_RETURN_IF_ERROR(verifyRank(rank, plan.mesh));
  MLT_RETURN_IF_ERROR(backend.checkSupported(rank));

  // Collectives, transfers, and the kernels of sharded programs that read
  // the rank's coordinate on a mesh axis, need the rank's communicator.
  bool launchesCollectives = false, launchesTransfers = false,
       readsMeshCoordinate = false;
  for (const ProgramDesc &program : rank.programs) {
    for (const InstructionDesc &inst : program.instructions) {
      launchesCollectives |= isCollectiveKernel(inst.kernel);
      launchesTransfers |= isTransferKernel(inst.kernel);
      const int axis = meshAxisAttribute(inst.kernel);
      readsMeshCoordinate |= axis >= 0 && inst.ints[axis] != -1;
    }
  }
  if (communicator) {
    if (communicator->mesh().axes() != plan.mesh)
      return errorf("rank ", rankIndex, "'s communicator is over the mesh ",
                    communicator->mesh().toString(),
                    ", not over the plan's mesh");
    if (communicator->rank() != int(rankIndex))
      return errorf("rank ", rankIndex, " was given the communicator of rank ",
                    communicator->rank());
  } else if (launchesCollectives) {
    return errorf("rank ", rankIndex,
                  " launches collectives but has no communicator");
  } else if (launchesTransfers) {
    return errorf("rank ", rankIndex,
                  " sends or receives but has no communicator");
  } else if (readsMeshCoordinate) {
    return errorf("rank ", rankIndex,
                  " launches kernels that read its mesh coordinate but has no "
                  "communicator");
  }

  StatusOr<std::unique_ptr<DeviceContext>> device =
      backend.createContext(RankInfo{rank.rank, plan.worldSize, communicator});
  if (!device)
    return device.takeStatus();
  // Before the arena: a plan for another GPU is refused at once.
  const std::string architecture = (*device)->architecture();
  if (!plan.target.empty() && !architecture.empty() &&
      plan.target != architecture)
    return errorf("the plan was compiled for ", plan.target,
                  " but this device is ", architecture,
                  "; compile it for this GPU (mlt-run MODEL --device cuda "
                  "--emit-plan FILE on a build of this architecture)");
  std::unique_ptr<Executor> executor(
      new Executor(rank, plan.mesh, backend, std::move(*device)));
  // verifyRank checked the mesh, and the rank is in it.
  std::vector<int> coordinates;
  if (!plan.mesh.empty())
    coordinates = *Mesh::create(plan.mesh)->coordinates(int(rankIndex));

  // The kernels' scratch, then the arena: the plan's memory is allocated
  // before the step, none of it mid-step.
  MLT_RETURN_IF_ERROR(executor->device_->reserveScratch(
      backend.scratchBytes(rank, plan.mesh)));
  StatusOr<uint8_t *> arena =
      executor->device_->allocate(std::max<uint64_t>(rank.arenaBytes, 1));
  if (!arena)
    return std::move(arena.takeStatus())
        .withContext("allocating the arena of " +
                     std::to_string(rank.arenaBytes) + " bytes (" +
                     formatBytes(rank.arenaBytes) + ")");
  executor->arena_ = *arena;
  executor->prepare(coordinates);
  MLT_RETURN_IF_ERROR(executor->fillConstants());
  return executor;
}

BufferView Executor::view(size_t index, uint32_t copy) const {
  const BufferDesc &buffer = rank_.buffers[index];
  return BufferView{arena_ + buffer.copyOffset(copy), buffer.dtype,
                    buffer.numElements()};
}

void Executor::prepare(const std::vector<int> &coordinates) {
  programs_.clear();
  for (const ProgramDesc &program : rank_.programs) {
    PreparedProgram prepared;
    prepared.name = program.name;
    prepared.transfers = isTransferProgram(program);
    for (const InstructionDesc &inst : program.instructions) {
      PreparedInstruction p{&inst, {}, {}, {}, {}, {}};
      for (auto [output, list, views] :
           {std::tuple(false, &inst.inputs, &p.inputs),
            std::tuple(true, &inst.outputs, &p.outputs)})
        for (uint32_t index : *list) {
          const BufferDesc &buffer = rank_.buffers[index];
          if (buffer.copies > 1)
            p.copied.push_back({output, uint32_t(views->size()),
                                buffer.copyStride(),
                                buffer.copyIndex == CopyIndex::Slot});
          views->push_back(view(index));
        }
      if (isTransferKernel(inst.kernel)) {
        // The peer's index in the group on the axis is its coordinate there
        // (verifyRank kept it inside the axis).
        const TransferAttrs attrs = transferAttrs(inst);
        const bool send = inst.kernel == Kernel::Send;
        const BufferView &buffer = send ? p.inputs[0] : p.outputs[0];
        p.axis = size_t(attrs.axis);
        p.transfer.kind = send ? TransferKind::Send : TransferKind::Receive;
        p.transfer.peer = coordinates[p.axis] + int(attrs.shift);
        p.transfer.dtype = buffer.dtype;
        p.transfer.count = size_t(attrs.count);
        p.transfer.buffer = buffer.data;
      }
      prepared.instructions.push_back(std::move(p));
    }
    if (program.name == kRefreshCopiesProgram)
      refreshProgram_ = programs_.size();
    programs_.push_back(std::move(prepared));
  }
}

StatusOr<size_t> Executor::findBuffer(std::string_view name) const {
  if (std::optional<size_t> index = rank_.findBuffer(name))
    return *index;
  return errorf("the plan has no buffer '", name, "'");
}

StatusOr<size_t> Executor::findProgram(std::string_view name) const {
  for (size_t i = 0; i < programs_.size(); ++i)
    if (programs_[i].name == name)
      return i;
  return errorf("the plan has no program '", name, "'");
}

Status Executor::runReplayed(Replay &replay, std::optional<size_t> program,
                              const std::function<Status()> &launch,
                              bool wait) {
  if (copiesStale_ && refreshProgram_ && program != refreshProgram_)
    MLT_RETURN_IF_ERROR(run(*refreshProgram_, /*wait=*/false));
  if (refreshProgram_ && program == refreshProgram_)
    copiesStale_ = false;
  ++replay.runs;
  replay.lastRunSetUp = deviceQueues_ && replay.runs == 1;
  if (replay.capture && !profiling_) {
    if (tracksPosition_)
      position_.at(program ? aloneCall(rank_, *program) : kStepCall,
                   kWholeCall, RankActivity::Running);
    MLT_RETURN_IF_ERROR(device_->replay(*replay.capture));
    return wait ? synchronize() : Status::ok();
  }
  // A first run and a capture set libraries, scratch memory and graphs up
  // on a device that queues: host work the hang watchdog does not time.
  setup_ = deviceQueues_ && replay.runs <= 2;
  struct SetupEnds {
    bool &setup;
    ~SetupEnds() { setup = false; }
  } setupEnds{setup_};
  // The second run is captured (the first has set up the libraries' plans
  // and the scratch memory, which a capture cannot allocate), then replayed
  // to run it. What cannot be captured runs launch by launch.
  if (captureEnabled_ && !profiling_ && replay.runs == 2 &&
      !replay.captureFailed && device_->canCapture()) {
    replay.lastRunSetUp = true;
    MLT_RETURN_IF_ERROR(device_->beginCapture());
    Status launched = launch();
    StatusOr<size_t> capture =
        launched ? device_->endCapture() : StatusOr<size_t>(launched);
    if (capture) {
      replay.capture = *capture;
      MLT_RETURN_IF_ERROR(device_->replay(*replay.capture));
      return wait ? synchronize() : Status::ok();
    }
    // A failed endCapture has dropped the capture; failed launches leave it
    // open.
    if (!launched)
      device_->abortCapture();
    replay.captureFailed = true;
  }
  MLT_RETURN_IF_ERROR(launch());
  return wait ? synchronize() : Status::ok();
}

Status Executor::run(size_t programIndex, bool wait) {
  PreparedProgram &program = programs_.at(programIndex);
  return runReplayed(
      program.replay, programIndex,
      [&] {
        const uint32_t call = aloneCall(rank_, programIndex);
        return program.transfers
                   ? runTransferGroup({{programIndex, -1, -1, call}})
                   : launchAll(programIndex, call);
      },
      wait);
}

Status Executor::runStep(bool wait) {
  if (rank_.step.empty())
    return errorf("the plan has no step");
  if (stepDelay_.count() > 0)
    std::this_thread::sleep_for(stepDelay_);
  return runCalls(StepKind::Training, stepReplay_, wait);
}

Status Executor::runEvalStep(bool wait) {
  if (rank_.evalStep.empty())
    return errorf("the plan has no evaluation step");
  return runCalls(StepKind::Evaluation, evalStepReplay_, wait);
}

Status Executor::runCalls(StepKind kind, Replay &replay, bool wait) {
  const std::vector<CallDesc> &step = rank_.calls(kind);
  const std::string what = stepKindName(kind);
  // The evaluation step is tracked where its caller placed the rank in an
  // evaluation (a StepScope of one, as the trainer does); run otherwise,
  // it leaves the position outside the training steps it describes.
  struct Recording {
    bool &flag;
    bool saved;
    ~Recording() { flag = saved; }
  } recording{tracksPosition_, tracksPosition_};
  tracksPosition_ = kind == StepKind::Training ||
                    (position_.evaluating() &&
                     position_.activity() != RankActivity::Outside);
  return runReplayed(
      replay, std::nullopt,
      [&]() -> Status {
        for (size_t c = 0; c < step.size();) {
          const CallDesc &call = step[c];
          if (!programs_[call.program].transfers) {
            Status status =
                launchAll(call.program, uint32_t(c), call.microbatch, call.slot);
            if (!status)
              return std::move(status).withContext(what + " call " +
                                                   std::to_string(c));
            ++c;
            continue;
          }
          // A transfer group: this call and the transfer calls after it.
          std::vector<TransferCall> group;
          const size_t first = c;
          for (; c < step.size() && programs_[step[c].program].transfers; ++c)
            group.push_back({step[c].program, step[c].microbatch,
                             step[c].slot, uint32_t(c)});
          Status status = runTransferGroup(group);
          if (!status)
            return std::move(status).withContext(
                what + " calls " + std::to_string(first) + ".." +
                std::to_string(c - 1) + " (a transfer group)");
        }
        return Status::ok();
      },
      wait);
}

Status Executor::synchronize() {
  // In a step, the host waits for the device here (for the whole step, on a
  // device that queues).
  const bool inStep = position_.activity() != RankActivity::Outside;
  if (inStep)
    position_.setActivity(RankActivity::Waiting);
  Status status = device_->synchronize();
  if (inStep)
    position_.setActivity(RankActivity::Running);
  if (status) {
    for (const PendingRead &read : pendingReads_) {
      switch (read.dtype) {
      case ElementType::F64:
        std::memcpy(read.out, read.bytes, sizeof(double));
        break;
      case ElementType::BF16: {
        uint16_t bits;
        std::memcpy(&bits, read.bytes, sizeof(bits));
        float value;
        cpu::castBF16ToFloat(&value, &bits, 1);
        *read.out = value;
        break;
      }
      default: { // f32 (readScalarAtSync checked)
        float value;
        std::memcpy(&value, read.bytes, sizeof(value));
        *read.out = value;
        break;
      }
      }
    }
  }
  pendingReads_.clear();
  return status;
}

Status Executor::readScalarAtSync(size_t index, double *out, uint32_t copy) {
  const BufferDesc &buffer = rank_.buffers.at(index);
  if (buffer.numElements() != 1)
    return errorf("buffer '", buffer.name, "' is not a scalar");
  if (buffer.dtype != ElementType::F32 && buffer.dtype != ElementType::F64 &&
      buffer.dtype != ElementType::BF16)
    return errorf("buffer '", buffer.name, "' is ",
                  elementTypeName(buffer.dtype),
                  "; only f32, f64 and bf16 scalars can be read");
  PendingRead &read = pendingReads_.emplace_back();
  read.dtype = buffer.dtype;
  read.out = out;
  if (copy >= buffer.copies)
    return errorf("buffer '", buffer.name, "' has no copy ", copy);
  return device_->copyToHostAtSync(read.bytes, arena_ + buffer.copyOffset(copy),
                                   buffer.bytes);
}

void Executor::resolveCopies(const PreparedInstruction &p, int32_t microbatch,
                             int32_t slot, std::vector<BufferView> &inputs,
                             std::vector<BufferView> &outputs) const {
  // Operands of buffers with a copy per micro-batch or slot move to the
  // call's copy (the plan verifier proved it in range; copy 0 without one).
  const uint64_t mbCopy = microbatch > 0 ? uint64_t(microbatch) : 0;
  const uint64_t slotCopy = slot > 0 ? uint64_t(slot) : 0;
  inputs = p.inputs;
  outputs = p.outputs;
  if (mbCopy == 0 && slotCopy == 0)
    return;
  for (const PreparedInstruction::Copied &operand : p.copied) {
    BufferView &view = (operand.output ? outputs : inputs)[operand.position];
    view.data += (operand.bySlot ? slotCopy : mbCopy) * operand.stride;
  }
}

Status Executor::runTransferGroup(const std::vector<TransferCall> &calls) {
  std::vector<PointToPoint> transfers;
  std::vector<std::pair<size_t, size_t>> launches;
  std::vector<BufferView> inputs, outputs;
  std::optional<size_t> axis;
  for (const TransferCall &call : calls) {
    const PreparedProgram &program = programs_.at(call.program);
    for (size_t i = 0; i < program.instructions.size(); ++i) {
      const PreparedInstruction &p = program.instructions[i];
      MLT_RETURN_IF_ERROR(holdIfStalled(call.call, uint32_t(i)));
      PointToPoint transfer = p.transfer;
      if (!p.copied.empty()) {
        resolveCopies(p, call.microbatch, call.slot, inputs, outputs);
        transfer.buffer =
            (transfer.kind == TransferKind::Send ? inputs[0] : outputs[0]).data;
      }
      transfers.push_back(transfer);
      launches.emplace_back(call.program, i);
      // One axis per group (verifyRank).
      axis = p.axis;
    }
  }
  if (!axis)
    return Status::ok();
  if (profiling_)
    profiled_.push_back(std::move(launches));
  // The group's place is its first transfer's.
  const RankActivity activity =
      launchActivity(*programs_.at(calls.front().program).instructions[0].inst);
  if (tracksPosition_)
    position_.at(calls.front().call, 0, activity);
  const WaitTimer timer(*this, activity);
  return device_->exchange(mesh_.at(*axis).name, transfers);
}

Executor::WaitTimer::WaitTimer(Executor &executor, RankActivity activity)
    : executor_(executor.tracksPosition_ && activity == RankActivity::Waiting
                    ? &executor
                    : nullptr) {
  if (executor_)
    begun_ = std::chrono::steady_clock::now();
}

Executor::WaitTimer::~WaitTimer() {
  if (!executor_)
    return;
  executor_->position_.addHostWait(uint64_t(
      std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::steady_clock::now() - begun_)
          .count()));
  executor_->position_.setActivity(RankActivity::Running);
}

RankActivity Executor::launchActivity(const InstructionDesc &inst) const {
  if (setup_)
    return RankActivity::Setup;
  if (!deviceQueues_ &&
      (isCollectiveKernel(inst.kernel) || isTransferKernel(inst.kernel)))
    return RankActivity::Waiting;
  return RankActivity::Running;
}

Status Executor::holdIfStalled(uint32_t call, uint32_t instruction) {
  if (!stall_ || !tracksPosition_ ||
      position_.evaluating() != stall_->evaluation)
    return Status::ok();
  const std::vector<uint64_t> &offsets =
      launchOffsets_[stall_->evaluation ? 1 : 0];
  if (call + 1 >= offsets.size() || position_.step() != stall_->step ||
      offsets[call] + instruction != stall_->launch)
    return Status::ok();
  position_.at(call, instruction, RankActivity::Stalled);
  while (!position_.abandoned())
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return errorf("held by MLT_FAULT_STALL before launch ", stall_->launch,
                stall_->evaluation ? " of the evaluation after step "
                                   : " of step ",
                stall_->step, " until the hang was reported");
}

Status Executor::launchAll(size_t programIndex, uint32_t call,
                           int32_t microbatch, int32_t slot) {
  const PreparedProgram &program = programs_.at(programIndex);
  const ProgramDesc &desc = rank_.programs.at(programIndex);
  MLT_RETURN_IF_ERROR(device_->beginProgram(desc));
  Status status = Status::ok();
  std::vector<BufferView> inputs, outputs;
  for (size_t i = 0; i < program.instructions.size() && status; ++i) {
    const PreparedInstruction &p = program.instructions[i];
    status = holdIfStalled(call, uint32_t(i));
    if (!status)
      break;
    if (profiling_)
      profiled_.push_back({{programIndex, i}});
    const RankActivity activity = launchActivity(*p.inst);
    if (tracksPosition_)
      position_.at(call, uint32_t(i), activity);
    {
      const WaitTimer timer(*this, activity);
      if (p.copied.empty() || (microbatch <= 0 && slot <= 0)) {
        status = device_->launch(*p.inst, p.inputs, p.outputs);
      } else {
        resolveCopies(p, microbatch, slot, inputs, outputs);
        status = device_->launch(*p.inst, inputs, outputs);
      }
    }
    if (!status) {
      std::ostringstream context;
      context << "program '" << program.name << "' instruction " << i << " ("
              << kernelName(p.inst->kernel) << ")";
      status = std::move(status).withContext(context.str());
    }
  }
  Status ended = device_->endProgram(desc);
  return status ? ended : status;
}

Status Executor::beginProfile() {
  MLT_RETURN_IF_ERROR(device_->beginLaunchTiming());
  profiling_ = true;
  profiled_.clear();
  return Status::ok();
}

StatusOr<std::vector<Executor::LaunchTime>> Executor::endProfile() {
  profiling_ = false;
  StatusOr<std::vector<DeviceContext::LaunchTiming>> times =
      device_->endLaunchTiming();
  if (!times)
    return times.takeStatus();
  if (times->size() != profiled_.size())
    return errorf("the device timed ", times->size(), " launches of ",
                  profiled_.size());
  // A transfer group's sends and receives share its exchange's time.
  std::vector<LaunchTime> launches;
  for (size_t i = 0; i < profiled_.size(); ++i)
    for (const auto &[program, instruction] : profiled_[i])
      launches.push_back(
          {program, instruction, (*times)[i].start, (*times)[i].milliseconds});
  profiled_.clear();
  return launches;
}

Status Executor::run(std::string_view programName) {
  StatusOr<size_t> index = findProgram(programName);
  if (!index)
    return index.takeStatus();
  return run(*index);
}

Status Executor::writeRaw(size_t index, const void *data, uint64_t bytes,
                          uint32_t copy) {
  const BufferDesc &buffer = rank_.buffers.at(index);
  if (bytes != buffer.bytes)
    return errorf("writing ", bytes, " bytes to buffer '", buffer.name, "' of ",
                  buffer.bytes, " bytes");
  if (copy >= buffer.copies)
    return errorf("buffer '", buffer.name, "' has no copy ", copy);
  if (buffer.kind == BufferKind::Parameter)
    copiesStale_ = true;
  return device_->copyToDevice(arena_ + buffer.copyOffset(copy), data, bytes);
}

Status Executor::readRaw(size_t index, void *data, uint64_t bytes,
                         uint32_t copy) {
  const BufferDesc &buffer = rank_.buffers.at(index);
  if (bytes != buffer.bytes)
    return errorf("reading ", bytes, " bytes from buffer '", buffer.name,
                  "' of ", buffer.bytes, " bytes");
  if (copy >= buffer.copies)
    return errorf("buffer '", buffer.name, "' has no copy ", copy);
  MLT_RETURN_IF_ERROR(synchronize());
  return device_->copyToHost(data, arena_ + buffer.copyOffset(copy), bytes);
}

Status Executor::writeFloats(size_t index, const float *values, int64_t count) {
  const BufferDesc &buffer = rank_.buffers.at(index);
  if (count != buffer.numElements())
    return errorf("writing ", count, " values to buffer '", buffer.name,
                  "' of ", buffer.numElements(), " elements");
  switch (buffer.dtype) {
  case ElementType::F32:
    return writeRaw(index, values, buffer.bytes);
  case ElementType::F64: {
    std::vector<double> host(values, values + count);
    return writeRaw(index, host.data(), buffer.bytes);
  }
  case ElementType::BF16: {
    std::vector<uint16_t> host(count);
    cpu::castFloatToBF16(host.data(), values, count);
    return writeRaw(index, host.data(), buffer.bytes);
  }
  default:
    return errorf("buffer '", buffer.name, "' is ",
                  elementTypeName(buffer.dtype),
                  "; floats can be written only to f32, f64 and bf16 buffers");
  }
}

StatusOr<std::vector<float>> Executor::readFloats(size_t index) {
  const BufferDesc &buffer = rank_.buffers.at(index);
  const int64_t count = buffer.numElements();
  std::vector<float> values(count);
  switch (buffer.dtype) {
  case ElementType::F32:
    MLT_RETURN_IF_ERROR(readRaw(index, values.data(), buffer.bytes));
    return values;
  case ElementType::F64: {
    std::vector<double> host(count);
    MLT_RETURN_IF_ERROR(readRaw(index, host.data(), buffer.bytes));
    for (int64_t i = 0; i < count; ++i)
      values[i] = float(host[i]);
    return values;
  }
  case ElementType::BF16: {
    std::vector<uint16_t> host(count);
    MLT_RETURN_IF_ERROR(readRaw(index, host.data(), buffer.bytes));
    cpu::castBF16ToFloat(values.data(), host.data(), count);
    return values;
  }
  default:
    return errorf("buffer '", buffer.name, "' is ",
                  elementTypeName(buffer.dtype),
                  "; only f32, f64 and bf16 buffers can be read as floats");
  }
}

Status Executor::readFloatRange(size_t index, int64_t begin, int64_t count,
                                float *out) {
  const BufferDesc &buffer = rank_.buffers.at(index);
  if (begin < 0 || count < 0 || begin + count > buffer.numElements())
    return errorf("reading elements [", begin, ", ", begin + count,
                  ") of buffer '", buffer.name, "', which holds ",
                  buffer.numElements());
  if (count == 0)
    return Status::ok();
  MLT_RETURN_IF_ERROR(synchronize());
  const uint8_t *data = arena_ + buffer.copyOffset(0);
  switch (buffer.dtype) {
  case ElementType::F32:
    return device_->copyToHost(out, data + begin * sizeof(float),
                               uint64_t(count) * sizeof(float));
  case ElementType::F64: {
    std::vector<double> host(count);
    MLT_RETURN_IF_ERROR(device_->copyToHost(
        host.data(), data + begin * sizeof(double), count * sizeof(double)));
    for (int64_t i = 0; i < count; ++i)
      out[i] = float(host[i]);
    return Status::ok();
  }
  case ElementType::BF16: {
    std::vector<uint16_t> host(count);
    MLT_RETURN_IF_ERROR(device_->copyToHost(
        host.data(), data + begin * sizeof(uint16_t), count * sizeof(uint16_t)));
    cpu::castBF16ToFloat(out, host.data(), count);
    return Status::ok();
  }
  default:
    return errorf("buffer '", buffer.name, "' is ",
                  elementTypeName(buffer.dtype),
                  "; only f32, f64 and bf16 buffers can be read as floats");
  }
}

Status Executor::writeScalar(size_t index, double value) {
  const BufferDesc &buffer = rank_.buffers.at(index);
  if (buffer.numElements() != 1)
    return errorf("buffer '", buffer.name, "' is not a scalar");
  if (buffer.dtype == ElementType::F64)
    return writeRaw(index, &value, sizeof(double));
  float single = float(value);
  return writeFloats(index, &single, 1);
}

StatusOr<double> Executor::readScalar(size_t index) {
  double value = 0.0;
  MLT_RETURN_IF_ERROR(readScalarAtSync(index, &value));
  MLT_RETURN_IF_ERROR(synchronize());
  return value;
}

Status Executor::zeroBuffers(BufferKind kind) {
  for (size_t i = 0; i < rank_.buffers.size(); ++i)
    if (rank_.buffers[i].kind == kind)
      MLT_RETURN_IF_ERROR(device_->fill(view(i), 0.0));
  if (kind == BufferKind::Parameter)
    copiesStale_ = true;
  return Status::ok();
}

Status Executor::fillConstants() {
  for (size_t i = 0; i < rank_.buffers.size(); ++i) {
    const BufferDesc &buffer = rank_.buffers[i];
    if (buffer.kind != BufferKind::Constant)
      continue;
    Status status = device_->fill(view(i), buffer.constantValue);
    if (!status)
      return std::move(status).withContext("constant '" + buffer.name + "'");
  }
  return Status::ok();
}
