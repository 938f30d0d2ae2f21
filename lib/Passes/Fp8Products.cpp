//===- Fp8Products.cpp - the linear layers' products in FP8 ---------------===//
//
// Part of mlt. Implements mlt-fp8-products (Passes.td): per program, each
// eligible product becomes a matmul_fp8 of quantized operands; the
// quantizations (amax, quantize_fp8) it asks for are shared with earlier
// products as mlt::analysis::shareQuantizations decides, and the new ones
// are launched just before it.
//
//===----------------------------------------------------------------------===//

#include "BufferIds.h"

#include "mlt/Analysis/QuantizationReuse.h"
#include "mlt/Dialect/MLT/MLTOps.h"
#include "mlt/Dialect/Runtime/RuntimeDialect.h"
#include "mlt/Passes/Passes.h"
#include "mlt/Plan/KernelInfo.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/SymbolTable.h"

#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace mlt {
#define GEN_PASS_DEF_MLTFP8PRODUCTS
#include "mlt/Passes/Passes.h.inc"
} // namespace mlt

using namespace mlir;
using namespace mlt;
namespace rtir = mlt::rt_ir;

namespace {

/// The role of an eligible product, which fixes its operands' formats.
enum class Role { Forward, InputGradient, WeightGradient };

/// One operand as the FP8 product reads it: `rows` x `cols` with the
/// reduction dimension contiguous, made from `source` (transposed when
/// `transpose`), in `e5m2` (a gradient) or e4m3.
struct Operand {
  Attribute source;
  int64_t rows = 0, cols = 0;
  bool transpose = false, e5m2 = false;
};

/// An eligible product: its FP8 form.
struct Fp8Product {
  Operand a, b;
  int64_t m = 0, n = 0, k = 0;
  bool accumulate = false, fast = false;
  Attribute addend; // matmul_add's
};

/// The role named `name` in the pass's options, as Transformer Engine
/// names them.
std::optional<Role> roleNamed(StringRef name) {
  if (name == "fprop")
    return Role::Forward;
  if (name == "dgrad")
    return Role::InputGradient;
  if (name == "wgrad")
    return Role::WeightGradient;
  return std::nullopt;
}

/// Which products the pass makes FP8 (the pass's options).
struct Recipe {
  bool allProducts = false;
  /// The roles made FP8 (Transformer Engine's fprop, dgrad, wgrad).
  bool roles[3] = {true, true, true};
  bool fpropFastAccumulation = true;
  /// The gradients' format: e5m2 (the hybrid format) or e4m3.
  bool gradientsE5M2 = true;
  /// Parameters whose products stay bf16: those whose names contain one of
  /// these.
  std::vector<std::string> bf16Parameters;
  /// Decoder layers kept bf16: those below `firstFp8Layer` and from
  /// `endFp8Layer` on.
  int64_t firstFp8Layer = 0;
  int64_t endFp8Layer = std::numeric_limits<int64_t>::max();
};

class Rewriter {
public:
  Rewriter(ModuleOp module, const Recipe &recipe)
      : module(module), buffers(module), recipe(recipe) {
    for (auto buffer : module.getOps<rtir::BufferOp>())
      lastBuffer = buffer;
  }

  /// The product's FP8 form, or none when it stays as it is: a plain
  /// matmul, matmul_accumulate or matmul_add of bf16 operands that is a
  /// decoder layer's (its weight's parameter name has ".layers.N.", unless
  /// allProducts; N not kept bf16 by the recipe) forward product (x W^T),
  /// input gradient (dy W) or weight gradient (dy^T x), in a role the
  /// recipe names, of one matrix (a batch folds only under a shared,
  /// untransposed b), with the sizes cuBLASLt's FP8 kernels take (k and n
  /// multiples of 16).
  std::optional<Fp8Product> eligible(rtir::LaunchOp launch) {
    const StringRef kernel = launch.getKernel();
    if (!launch.isPlain() ||
        (kernel != "matmul" && kernel != "matmul_accumulate" &&
         kernel != "matmul_add"))
      return std::nullopt;
    // matmul_accumulate and matmul_add name their ints as matmul does.
    using A = rt::attrs::Matmul;
    ArrayRef<int64_t> ints = launch.getInts();
    const int64_t batch = ints[A::batch], m = ints[A::m], n = ints[A::n],
                  k = ints[A::k];
    const bool transposeA = ints[A::transpose_a],
               transposeB = ints[A::transpose_b], bBatched = ints[A::b_batched];
    rtir::BufferOp a = bufferOf(launch.getInputs()[0]);
    rtir::BufferOp b = bufferOf(launch.getInputs()[1]);
    rtir::BufferOp c = bufferOf(launch.getOutputs()[0]);
    if (!a || !b || !c || !isBF16(a) || !isBF16(b) ||
        !(isBF16(c) || c.getTensorType().getElementType().isF32()))
      return std::nullopt;
    std::optional<Role> role;
    if (b.getKind() == rtir::BufferKind::parameter_copy &&
        isLayerParameter(b) && !transposeA && !bBatched)
      role = transposeB ? Role::Forward : Role::InputGradient;
    else if (c.getKind() == rtir::BufferKind::gradient && isLayerParameter(c) &&
             transposeA && !transposeB && batch == 1)
      role = Role::WeightGradient;
    if (!role || !recipe.roles[int(*role)])
      return std::nullopt;
    Fp8Product p;
    p.m = batch * m;
    p.n = n;
    p.k = k;
    if (p.k % 16 != 0 || p.n % 16 != 0 || p.m < 1)
      return std::nullopt;
    // a as [m, k] (stored [k, m] when transposed), b as [n, k] (stored
    // [k, n] when not transposed).
    p.a = {launch.getInputs()[0], transposeA ? k : p.m, transposeA ? p.m : k,
           transposeA, *role != Role::Forward && recipe.gradientsE5M2};
    p.b = {launch.getInputs()[1], transposeB ? n : k, transposeB ? k : n,
           !transposeB, false};
    p.accumulate = kernel == "matmul_accumulate";
    p.fast = *role == Role::Forward && recipe.fpropFastAccumulation;
    if (kernel == "matmul_add")
      p.addend = launch.getInputs()[2];
    return p;
  }

  /// The launch as a QuantizeItem: the bases it writes, whether it is a
  /// barrier, and (for an eligible product) its requests: each operand's
  /// amax, then its copy.
  analysis::QuantizeItem item(Operation &op,
                              const std::optional<Fp8Product> &product) {
    analysis::QuantizeItem item;
    auto launch = dyn_cast<rtir::LaunchOp>(op);
    if (!launch) {
      item.barrier = true;
      return item;
    }
    item.barrier = !launch.isPlain();
    for (Attribute ref : launch.getOutputs())
      item.writes.push_back(idOf(ref));
    if (product)
      for (const Operand *operand : {&product->a, &product->b}) {
        item.requests.push_back({idOf(operand->source), kAmaxForm});
        item.requests.push_back({idOf(operand->source), formOf(*operand)});
      }
    return item;
  }

  /// Launches, before `before`, the amax of `source` into a new scalar.
  Attribute emitAmax(Operation *before, Attribute source) {
    Attribute amax = scalar(before->getLoc(), "fp8.amax:", source);
    OpBuilder b(before);
    using A = rt::attrs::Amax;
    rtir::LaunchOp::create(b, before->getLoc(), "amax", {source}, {amax},
                           rt::kernelInts<A>({{A::n, numElements(source)}}));
    return amax;
  }

  /// Launches, before `before`, the quantization of `operand` with the
  /// amax in `amax`, in its layout or, with `both`, in both layouts from
  /// one pass: the copies (plain, transposed; null where not made) and the
  /// inverse scale.
  struct Copies {
    Attribute plain, transposed, scaleInv;
  };
  Copies emitQuantize(Operation *before, const Operand &operand, Attribute amax,
                      bool both) {
    MLIRContext *context = module.getContext();
    Type element = operand.e5m2 ? Type(Float8E5M2Type::get(context))
                                : Type(Float8E4M3FNType::get(context));
    const std::string format = operand.e5m2 ? "e5m2" : "e4m3";
    Copies copies;
    copies.scaleInv =
        scalar(before->getLoc(), "fp8.scale_inv:", operand.source);
    SmallVector<Attribute> outputs = {copies.scaleInv};
    if (both || !operand.transpose) {
      copies.plain =
          buffer(before->getLoc(), "fp8." + format + ":", operand.source,
                 RankedTensorType::get({operand.rows, operand.cols}, element));
      outputs.push_back(copies.plain);
    }
    if (both || operand.transpose) {
      copies.transposed =
          buffer(before->getLoc(), "fp8." + format + ".t:", operand.source,
                 RankedTensorType::get({operand.cols, operand.rows}, element));
      outputs.push_back(copies.transposed);
    }
    OpBuilder b(before);
    using A = rt::attrs::QuantizeFp8;
    rtir::LaunchOp::create(
        b, before->getLoc(), "quantize_fp8", {operand.source, amax}, outputs,
        rt::kernelInts<A>(
            {{A::rows, operand.rows},
             {A::cols, operand.cols},
             {A::layout, both ? 2 : (operand.transpose ? 1 : 0)}}));
    return copies;
  }

  /// The form of `operand`'s copy in the other layout.
  uint64_t otherLayoutForm(const Operand &operand) {
    Operand other = operand;
    other.transpose = !operand.transpose;
    return formOf(other);
  }

private:
  static constexpr uint64_t kAmaxForm = 0;

  rtir::BufferOp bufferOf(Attribute ref) { return buffers.bufferOf(ref); }
  int64_t idOf(Attribute ref) { return buffers.idOf(ref); }
  static bool isBF16(rtir::BufferOp buffer) {
    return buffer.getTensorType().getElementType().isBF16();
  }
  /// Whether `buffer` is a parameter whose products the recipe makes FP8:
  /// a decoder layer's (".layers.N." in its name, N in the recipe's range),
  /// or any, with allProducts, but for the layers the recipe keeps bf16.
  bool isLayerParameter(rtir::BufferOp buffer) {
    std::optional<StringRef> parameter = buffer.getParameter();
    if (!parameter)
      return false;
    for (const std::string &name : recipe.bf16Parameters)
      if (parameter->contains(name))
        return false;
    const size_t at = parameter->find(".layers.");
    if (at == StringRef::npos)
      return recipe.allProducts;
    int64_t layer = 0;
    StringRef rest = parameter->drop_front(at + strlen(".layers."));
    if (rest.consumeInteger(10, layer))
      return recipe.allProducts;
    return layer >= recipe.firstFp8Layer && layer < recipe.endFp8Layer;
  }
  int64_t numElements(Attribute ref) {
    return bufferOf(ref).getTensorType().getNumElements();
  }

  /// One form per layout, format and shape of a copy (0 is the amax).
  uint64_t formOf(const Operand &operand) {
    const auto key = std::make_tuple(operand.transpose, operand.e5m2,
                                     operand.rows, operand.cols);
    return forms.try_emplace(key, uint64_t(forms.size() + 1)).first->second;
  }

  /// A new temporary named `prefix` + the source's name (made unique).
  Attribute buffer(Location loc, StringRef prefix, Attribute source,
                   RankedTensorType type) {
    OpBuilder b(module.getContext());
    if (lastBuffer)
      b.setInsertionPointAfter(lastBuffer);
    else
      b.setInsertionPointToStart(module.getBody());
    const std::string name = (prefix + rtir::bufferName(source)).str();
    auto op = rtir::BufferOp::create(
        b, loc, b.getStringAttr(name),
        rtir::BufferKindAttr::get(b.getContext(), rtir::BufferKind::temporary),
        TypeAttr::get(type), IntegerAttr(), IntegerAttr(), IntegerAttr(),
        StringAttr(), UnitAttr(), FloatAttr(), FlatSymbolRefAttr(),
        IntegerAttr(), StringAttr(), IntegerAttr(), FlatSymbolRefAttr(),
        UnitAttr(), UnitAttr());
    // The table renames a name taken already (a source quantized again
    // after it was written).
    buffers.table().insert(op);
    lastBuffer = op;
    return FlatSymbolRefAttr::get(op.getSymNameAttr());
  }
  Attribute scalar(Location loc, StringRef prefix, Attribute source) {
    return buffer(
        loc, prefix, source,
        RankedTensorType::get({}, Float32Type::get(module.getContext())));
  }

  ModuleOp module;
  BufferIds buffers;
  Recipe recipe;
  rtir::BufferOp lastBuffer;
  std::map<std::tuple<bool, bool, int64_t, int64_t>, uint64_t> forms;
};

class MLTFp8ProductsPass
    : public mlt::impl::MLTFp8ProductsBase<MLTFp8ProductsPass> {
public:
  using MLTFp8ProductsBase::MLTFp8ProductsBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    Recipe recipe;
    recipe.allProducts = allProducts;
    if (!products.empty()) {
      for (bool &role : recipe.roles)
        role = false;
      for (const std::string &name : products) {
        std::optional<Role> role = roleNamed(name);
        if (!role) {
          module.emitError("mlt-fp8-products: unknown product '")
              << name << "' (expected fprop, dgrad or wgrad)";
          return signalPassFailure();
        }
        recipe.roles[int(*role)] = true;
      }
    }
    if (fpropAccumulation != "fast" && fpropAccumulation != "f32") {
      module.emitError("mlt-fp8-products: fprop-accumulation must be fast "
                       "or f32, got '")
          << fpropAccumulation << "'";
      return signalPassFailure();
    }
    recipe.fpropFastAccumulation = fpropAccumulation == "fast";
    if (format != "hybrid" && format != "e4m3") {
      module.emitError("mlt-fp8-products: format must be hybrid or e4m3, "
                       "got '")
          << format << "'";
      return signalPassFailure();
    }
    recipe.gradientsE5M2 = format == "hybrid";
    recipe.bf16Parameters.assign(bf16Parameters.begin(), bf16Parameters.end());
    if (bf16FirstLayers < 0 || bf16LastLayers < 0) {
      module.emitError("mlt-fp8-products: bf16-first-layers and "
                       "bf16-last-layers must not be negative");
      return signalPassFailure();
    }
    recipe.firstFp8Layer = bf16FirstLayers;
    if (bf16LastLayers > 0) {
      // The model's depth, not the stage's: a stage's module keeps the
      // model's configuration.
      auto config = module->getAttrOfType<LlamaConfigAttr>(
          MLTDialect::getModelAttrName());
      if (!config) {
        module.emitError("mlt-fp8-products: bf16-last-layers needs the "
                         "model's depth, and the module has no model "
                         "configuration ('mlt.model')");
        return signalPassFailure();
      }
      recipe.endFp8Layer = config.getNumLayers() - bf16LastLayers;
    }
    Rewriter rewriter(module, recipe);
    bool changed = false;
    for (rtir::ProgramOp program : module.getOps<rtir::ProgramOp>()) {
      Block &body = program.getBody().front();
      SmallVector<Operation *> ops;
      std::vector<std::optional<Fp8Product>> products;
      std::vector<analysis::QuantizeItem> items;
      for (Operation &op : body) {
        ops.push_back(&op);
        auto launch = dyn_cast<rtir::LaunchOp>(op);
        products.push_back(launch ? rewriter.eligible(launch) : std::nullopt);
        items.push_back(rewriter.item(op, products.back()));
      }
      const auto origins = analysis::shareQuantizations(items);
      // The first launch of the backward pass (`backward_start`): the
      // launches made for a product go before it, so the backward starts at
      // the first of those made for its first launch.
      std::optional<size_t> start;
      if (IntegerAttr attr = program.getBackwardStartAttr())
        start = size_t(attr.getInt());
      Operation *backwardFirst =
          start && *start < ops.size() ? ops[*start] : nullptr;
      // The launch before the backward's first product, when it is one.
      Operation *beforeBackward = nullptr;
      // The copies each request reads: amax, or q and scale_inv.
      std::map<analysis::RequestRef, std::pair<Attribute, Attribute>> made;
      // A copy that makes a new one in the layout another request of its
      // source makes later, from the same amax (nothing wrote the source
      // between), makes both in one pass: the first such request, by
      // (amax origin, form).
      std::map<std::pair<analysis::RequestRef, uint64_t>,
               std::vector<analysis::RequestRef>>
          newCopies;
      for (size_t i = 0; i < items.size(); ++i)
        for (size_t r = 1; r < items[i].requests.size(); r += 2)
          if (origins[i][r] == analysis::RequestRef{i, r})
            newCopies[{origins[i][r - 1], items[i].requests[r].form}].push_back(
                {i, r});
      for (size_t i = 0; i < ops.size(); ++i) {
        if (!products[i])
          continue;
        changed = true;
        if (start && i == *start)
          beforeBackward = ops[i]->getPrevNode();
        const Fp8Product &p = *products[i];
        // Requests: a's amax, a's copy, b's amax, b's copy.
        Attribute copies[2], scales[2];
        const Operand *operands[2] = {&p.a, &p.b};
        for (size_t o = 0; o < 2; ++o) {
          const analysis::RequestRef amaxAt = origins[i][2 * o];
          const analysis::RequestRef copyAt = origins[i][2 * o + 1];
          if (amaxAt == analysis::RequestRef{i, 2 * o})
            made[amaxAt] = {rewriter.emitAmax(ops[i], operands[o]->source),
                            Attribute()};
          if (copyAt == analysis::RequestRef{i, 2 * o + 1} &&
              !made.count(copyAt)) {
            // The first later request of the other layout, if any.
            std::optional<analysis::RequestRef> pair;
            auto it = newCopies.find(
                {amaxAt, rewriter.otherLayoutForm(*operands[o])});
            if (it != newCopies.end())
              for (const analysis::RequestRef &later : it->second)
                if (later.first > i && !made.count(later)) {
                  pair = later;
                  break;
                }
            const Rewriter::Copies c = rewriter.emitQuantize(
                ops[i], *operands[o], made[amaxAt].first, pair.has_value());
            const bool transposed = operands[o]->transpose;
            made[copyAt] = {transposed ? c.transposed : c.plain, c.scaleInv};
            if (pair)
              made[*pair] = {transposed ? c.plain : c.transposed, c.scaleInv};
          }
          copies[o] = made[copyAt].first;
          scales[o] = made[copyAt].second;
        }
        auto launch = cast<rtir::LaunchOp>(ops[i]);
        SmallVector<Attribute> inputs = {copies[0], scales[0], copies[1],
                                         scales[1]};
        if (p.addend)
          inputs.push_back(p.addend);
        OpBuilder b(launch);
        rtir::LaunchOp::create(
            b, launch.getLoc(), "matmul_fp8", inputs, {launch.getOutputs()[0]},
            rt::kernelInts<rt::attrs::MatmulFp8>(
                {{rt::attrs::MatmulFp8::m, p.m},
                 {rt::attrs::MatmulFp8::n, p.n},
                 {rt::attrs::MatmulFp8::k, p.k},
                 {rt::attrs::MatmulFp8::accumulate, p.accumulate ? 1 : 0},
                 {rt::attrs::MatmulFp8::fast_accumulation, p.fast ? 1 : 0}}));
        launch.erase();
        if (start && i == *start)
          backwardFirst =
              beforeBackward ? beforeBackward->getNextNode() : &body.front();
      }
      if (backwardFirst) {
        int64_t index = 0;
        for (Operation &op : body) {
          if (&op == backwardFirst)
            break;
          ++index;
        }
        program.setBackwardStartAttr(
            IntegerAttr::get(IntegerType::get(program.getContext(), 64), index));
      }
    }
    if (!changed)
      markAllAnalysesPreserved();
  }
};

} // namespace
