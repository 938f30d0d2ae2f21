//===- HFLlama.cpp - Hugging Face LLaMA config importer -------------------===//
//
// Part of mlt. Parses HF `config.json` files (with LLVM's JSON parser, since
// the compiler links LLVM anyway) and builds the `mlt` module of the model.
//
//===----------------------------------------------------------------------===//

#include "mlt/Import/HFLlama.h"
#include "mlt/Plan/ModelConfig.h"
#include "mlt/Support/HFModelDirectory.h"
#include "mlt/Support/JsonDepth.h"

#include "mlt/Dialect/MLT/MLTOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <cmath>

using namespace mlir;
using namespace mlt;

namespace {

llvm::Error configError(llvm::StringRef source, const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 source + ": " + message);
}

/// An error of LlamaConfig::verify; callers prefix where the config came from.
llvm::Error invalidConfig(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// The integer a JSON number holds, if it holds one exactly. Not
/// llvm::json's getAsInteger alone: its range check lets a double of
/// exactly 2^63 through and converts it to int64_t, which is undefined
/// (mlt-fuzz-hf-config found "vocab_size": 9223372036854775807.2, which
/// parses as 2^63); every magnitude from 2^63 up is refused first.
std::optional<int64_t> integerOf(const llvm::json::Value &value) {
  std::optional<double> number = value.getAsNumber();
  if (!number || !(std::fabs(*number) < 0x1p63))
    return std::nullopt;
  return value.getAsInteger();
}

/// Reads the fields of one JSON object, reporting the first bad one by name.
class FieldReader {
public:
  FieldReader(const llvm::json::Object &object, llvm::StringRef source)
      : object(object), source(source) {}

  /// A positive integer field; `fallback` when absent (or an error if none).
  llvm::Expected<int64_t> positiveInt(llvm::StringRef key,
                                      std::optional<int64_t> fallback = {}) {
    const llvm::json::Value *value = object.get(key);
    if (!value || value->kind() == llvm::json::Value::Null) {
      if (fallback)
        return *fallback;
      return configError(source, "missing field '" + key + "'");
    }
    std::optional<int64_t> number = integerOf(*value);
    if (!number)
      return configError(source, "field '" + key + "' must be an integer, got " +
                                     describe(*value));
    if (*number <= 0)
      return configError(source, "field '" + key + "' must be positive, got " +
                                     llvm::Twine(*number));
    return *number;
  }

  llvm::Expected<double> positiveNumber(llvm::StringRef key, double fallback) {
    const llvm::json::Value *value = object.get(key);
    if (!value || value->kind() == llvm::json::Value::Null)
      return fallback;
    std::optional<double> number = value->getAsNumber();
    if (!number)
      return configError(source, "field '" + key + "' must be a number, got " +
                                     describe(*value));
    if (!(*number > 0.0) || !std::isfinite(*number))
      return configError(source, "field '" + key +
                                     "' must be a positive number, got " +
                                     describe(*value));
    return *number;
  }

  /// A finite number field that must be present; `why` ends the message of
  /// a missing one.
  llvm::Expected<double> number(llvm::StringRef key, llvm::StringRef why) {
    const llvm::json::Value *value = object.get(key);
    if (!value || value->kind() == llvm::json::Value::Null)
      return configError(source, "missing field '" + key + "' (" + why + ")");
    std::optional<double> number = value->getAsNumber();
    if (!number || !std::isfinite(*number))
      return configError(source, "field '" + key +
                                     "' must be a finite number, got " +
                                     describe(*value));
    return *number;
  }

  llvm::Expected<bool> boolean(llvm::StringRef key, bool fallback) {
    const llvm::json::Value *value = object.get(key);
    if (!value || value->kind() == llvm::json::Value::Null)
      return fallback;
    std::optional<bool> flag = value->getAsBoolean();
    if (!flag)
      return configError(source, "field '" + key +
                                     "' must be true or false, got " +
                                     describe(*value));
    return *flag;
  }

  /// A special-token id field: an integer or a list of integers; none
  /// when absent or null.
  llvm::Expected<std::optional<TokenIds>> tokenIds(llvm::StringRef key) {
    const llvm::json::Value *value = object.get(key);
    if (!value || value->kind() == llvm::json::Value::Null)
      return std::nullopt;
    auto bad = [&]() {
      return configError(source, "field '" + key +
                                     "' must be an integer or a list of "
                                     "integers, got " +
                                     describe(*value));
    };
    TokenIds read;
    if (const llvm::json::Array *list = value->getAsArray()) {
      read.list = true;
      for (const llvm::json::Value &element : *list) {
        std::optional<int64_t> id = integerOf(element);
        if (!id)
          return bad();
        read.ids.push_back(*id);
      }
      return read;
    }
    std::optional<int64_t> id = integerOf(*value);
    if (!id)
      return bad();
    read.ids.push_back(*id);
    return read;
  }

  /// A string field, or "" when absent.
  llvm::Expected<std::string> string(llvm::StringRef key) {
    const llvm::json::Value *value = object.get(key);
    if (!value || value->kind() == llvm::json::Value::Null)
      return std::string();
    std::optional<llvm::StringRef> text = value->getAsString();
    if (!text)
      return configError(source, "field '" + key + "' must be a string, got " +
                                     describe(*value));
    return text->str();
  }

  static std::string describe(const llvm::json::Value &value) {
    std::string text;
    llvm::raw_string_ostream os(text);
    os << value;
    if (text.size() > 40)
      text = text.substr(0, 37) + "...";
    return text;
  }

private:
  const llvm::json::Object &object;
  llvm::StringRef source;
};

/// Fails with the value of `expected` or moves it into `out`.
template <typename T>
llvm::Error assign(T &out, llvm::Expected<T> expected) {
  if (!expected)
    return expected.takeError();
  out = std::move(*expected);
  return llvm::Error::success();
}

} // namespace

//===----------------------------------------------------------------------===//
// LlamaConfig
//===----------------------------------------------------------------------===//

llvm::Error LlamaConfig::verify() const {
  std::pair<const char *, int64_t> positives[] = {
      {"vocab_size", vocabSize},
      {"hidden_size", hiddenSize},
      {"intermediate_size", intermediateSize},
      {"num_hidden_layers", numLayers},
      {"num_attention_heads", numHeads},
      {"num_key_value_heads", numKvHeads},
      {"head_dim", headDim},
      {"max_position_embeddings", maxPositionEmbeddings}};
  for (auto [name, value] : positives)
    if (value <= 0)
      return invalidConfig(
          llvm::formatv("{0} must be positive, got {1}", name, value));
  // Bounded as the runtime bounds a plan's config (ModelConfig.h): what is
  // past them is a typo or an attack.
  for (auto [name, value] : positives)
    if (value > rt::llamaLimit(name))
      return invalidConfig(llvm::formatv("{0} is {1}, beyond the {2} mlt "
                                         "accepts",
                                         name, value, rt::llamaLimit(name)));
  if (numHeads % numKvHeads != 0)
    return invalidConfig(
        llvm::formatv("num_attention_heads ({0}) must be a multiple of "
                      "num_key_value_heads ({1})",
                      numHeads, numKvHeads));
  if (headDim % 2 != 0)
    return invalidConfig(
        llvm::formatv("head_dim ({0}) must be even for rotary embeddings",
                      headDim));
  if (!(rmsNormEps > 0.0) || !(ropeTheta > 0.0))
    return invalidConfig("rms_norm_eps and rope_theta must be positive");
  if (Status status = rt::checkRopeScaling(ropeScaling); !status)
    return invalidConfig(status.message());
  return llvm::Error::success();
}

int64_t LlamaConfig::numParameters() const {
  int64_t qDim = numHeads * headDim, kvDim = numKvHeads * headDim;
  int64_t perLayer = 2 * hiddenSize                        // two norms
                     + hiddenSize * (qDim + 2 * kvDim)     // q, k, v
                     + qDim * hiddenSize                   // o
                     + 3 * hiddenSize * intermediateSize;  // gate, up, down
  int64_t embeddings = vocabSize * hiddenSize * (tieWordEmbeddings ? 1 : 2);
  return numLayers * perLayer + embeddings + hiddenSize;
}

LlamaConfigAttr LlamaConfig::toAttr(MLIRContext *context) const {
  Builder b(context);
  auto tokenIdsAttr = [&](const std::optional<TokenIds> &ids) -> Attribute {
    if (!ids)
      return Attribute();
    if (ids->list)
      return b.getDenseI64ArrayAttr(ids->ids);
    return b.getI64IntegerAttr(ids->ids.front());
  };
  return LlamaConfigAttr::get(
      context, vocabSize, hiddenSize, intermediateSize, numLayers, numHeads,
      numKvHeads, headDim, maxPositionEmbeddings, b.getF64FloatAttr(rmsNormEps),
      b.getF64FloatAttr(ropeTheta), b.getBoolAttr(tieWordEmbeddings),
      ropeScaling.isScaled() ? Llama3RopeScalingAttr::get(context, ropeScaling)
                             : Llama3RopeScalingAttr(),
      tokenIdsAttr(bosTokenId), tokenIdsAttr(eosTokenId),
      tokenIdsAttr(padTokenId));
}

namespace {

/// The ids of a `#mlt.llama` token-id parameter (see MLTAttrs.td).
std::optional<TokenIds> tokenIdsOf(Attribute attr) {
  if (auto list = dyn_cast_or_null<DenseI64ArrayAttr>(attr))
    return TokenIds{std::vector<int64_t>(list.asArrayRef().begin(),
                                         list.asArrayRef().end()),
                    /*list=*/true};
  if (auto id = dyn_cast_or_null<IntegerAttr>(attr))
    return TokenIds{{id.getInt()}, /*list=*/false};
  return std::nullopt;
}

} // namespace

LlamaConfig LlamaConfig::fromAttr(LlamaConfigAttr attr) {
  LlamaConfig c;
  c.vocabSize = attr.getVocabSize();
  c.hiddenSize = attr.getHiddenSize();
  c.intermediateSize = attr.getIntermediateSize();
  c.numLayers = attr.getNumLayers();
  c.numHeads = attr.getNumHeads();
  c.numKvHeads = attr.getNumKvHeads();
  c.headDim = attr.getHeadDim();
  c.maxPositionEmbeddings = attr.getMaxPositionEmbeddings();
  c.rmsNormEps = attr.getRmsNormEps().getValueAsDouble();
  c.ropeTheta = attr.getRopeTheta().getValueAsDouble();
  c.tieWordEmbeddings = attr.getTieWordEmbeddings().getValue();
  if (Llama3RopeScalingAttr scaling = attr.getRopeScaling())
    c.ropeScaling = scaling.toRopeScaling();
  c.bosTokenId = tokenIdsOf(attr.getBosTokenId());
  c.eosTokenId = tokenIdsOf(attr.getEosTokenId());
  c.padTokenId = tokenIdsOf(attr.getPadTokenId());
  return c;
}

//===----------------------------------------------------------------------===//
// config.json
//===----------------------------------------------------------------------===//

llvm::Expected<LlamaConfig> mlt::parseHFLlamaConfig(llvm::StringRef json,
                                                    llvm::StringRef source) {
  // (LLVM's parser recurses per level: a text nested 40,000 deep would
  // overflow the stack)
  if (std::optional<size_t> at =
          jsonTooDeepAt(std::string_view(json.data(), json.size())))
    return configError(source, "not a config: " + jsonTooDeepMessage(*at));
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(json);
  if (!parsed)
    return configError(source, "not valid JSON: " +
                                   llvm::toString(parsed.takeError()));
  const llvm::json::Object *object = parsed->getAsObject();
  if (!object)
    return configError(source, "expected a JSON object at the top level");
  FieldReader read(*object, source);

  llvm::Expected<std::string> modelType = read.string("model_type");
  if (!modelType)
    return modelType.takeError();
  if (!modelType->empty() && *modelType != "llama")
    return configError(source, "field 'model_type' is '" + *modelType +
                                   "'; only 'llama' models are supported");
  llvm::Expected<std::string> act = read.string("hidden_act");
  if (!act)
    return act.takeError();
  if (!act->empty() && *act != "silu")
    return configError(source, "field 'hidden_act' is '" + *act +
                                   "'; LLaMA's SwiGLU MLP needs 'silu'");
  for (llvm::StringRef bias : {"attention_bias", "mlp_bias"}) {
    llvm::Expected<bool> hasBias = read.boolean(bias, false);
    if (!hasBias)
      return hasBias.takeError();
    if (*hasBias)
      return configError(source, "field '" + bias +
                                     "' is true; biases are not supported");
  }

  LlamaConfig c;
  if (llvm::Error e = assign(c.vocabSize, read.positiveInt("vocab_size")))
    return std::move(e);
  if (llvm::Error e = assign(c.hiddenSize, read.positiveInt("hidden_size")))
    return std::move(e);
  if (llvm::Error e =
          assign(c.intermediateSize, read.positiveInt("intermediate_size")))
    return std::move(e);
  if (llvm::Error e =
          assign(c.numLayers, read.positiveInt("num_hidden_layers")))
    return std::move(e);
  if (llvm::Error e =
          assign(c.numHeads, read.positiveInt("num_attention_heads")))
    return std::move(e);
  if (llvm::Error e = assign(c.numKvHeads,
                             read.positiveInt("num_key_value_heads", c.numHeads)))
    return std::move(e);
  const llvm::json::Value *headDim = object->get("head_dim");
  bool hasHeadDim = headDim && headDim->kind() != llvm::json::Value::Null;
  if (!hasHeadDim && c.hiddenSize % c.numHeads != 0)
    return configError(source,
                       llvm::formatv("hidden_size ({0}) is not divisible by "
                                     "num_attention_heads ({1}), and no "
                                     "'head_dim' is given",
                                     c.hiddenSize, c.numHeads)
                           .str());
  if (llvm::Error e = assign(c.headDim, read.positiveInt(
                                            "head_dim", c.hiddenSize / c.numHeads)))
    return std::move(e);
  if (llvm::Error e = assign(c.maxPositionEmbeddings,
                             read.positiveInt("max_position_embeddings", 2048)))
    return std::move(e);
  if (llvm::Error e =
          assign(c.rmsNormEps, read.positiveNumber("rms_norm_eps", 1e-6)))
    return std::move(e);
  if (llvm::Error e = assign(c.tieWordEmbeddings,
                             read.boolean("tie_word_embeddings", false)))
    return std::move(e);
  if (llvm::Error e = assign(c.bosTokenId, read.tokenIds("bos_token_id")))
    return std::move(e);
  if (llvm::Error e = assign(c.eosTokenId, read.tokenIds("eos_token_id")))
    return std::move(e);
  if (llvm::Error e = assign(c.padTokenId, read.tokenIds("pad_token_id")))
    return std::move(e);

  // The rotary base and scaling: transformers 5 nests both in
  // `rope_parameters`, older configs have `rope_theta` and maybe
  // `rope_scaling`.
  if (llvm::Error e = assign(c.ropeTheta, read.positiveNumber("rope_theta", 1e4)))
    return std::move(e);
  // The object that named the scaling kind first, to refuse a second that
  // names another.
  std::optional<std::string> scalingFrom;
  for (llvm::StringRef key : {"rope_parameters", "rope_scaling"}) {
    const llvm::json::Value *value = object->get(key);
    if (!value || value->kind() == llvm::json::Value::Null)
      continue;
    const llvm::json::Object *rope = value->getAsObject();
    if (!rope)
      return configError(source, "field '" + key + "' must be an object");
    // FieldReader keeps a StringRef: the name must outlive it.
    std::string ropeSource = (source + ": " + key).str();
    FieldReader readRope(*rope, ropeSource);
    llvm::Expected<std::string> type = readRope.string("rope_type");
    if (!type)
      return type.takeError();
    if (type->empty()) {
      // Old spelling of the scaling kind.
      llvm::Expected<std::string> legacy = readRope.string("type");
      if (!legacy)
        return legacy.takeError();
      *type = *legacy;
    }
    if (!type->empty() && *type != "default" && *type != "llama3")
      return configError(
          source, "field '" + key + ".rope_type' is '" + *type +
                      "'; only 'default' and 'llama3' rotary embeddings are "
                      "supported");
    if (llvm::Error e = assign(c.ropeTheta, readRope.positiveNumber(
                                                "rope_theta", c.ropeTheta)))
      return std::move(e);
    if (type->empty())
      continue;
    rt::RopeScaling scaling;
    if (*type == "llama3") {
      llvm::StringRef why = "llama3 rope scaling needs it";
      scaling.kind = rt::RopeScalingKind::Llama3;
      if (llvm::Error e =
              assign(scaling.factor, readRope.number("factor", why)))
        return std::move(e);
      if (llvm::Error e = assign(scaling.lowFreqFactor,
                                 readRope.number("low_freq_factor", why)))
        return std::move(e);
      if (llvm::Error e = assign(scaling.highFreqFactor,
                                 readRope.number("high_freq_factor", why)))
        return std::move(e);
      // As transformers 5 reads it: a top-level
      // original_max_position_embeddings comes first, then the one here,
      // then max_position_embeddings.
      llvm::Expected<int64_t> topLevel =
          read.positiveInt("original_max_position_embeddings", int64_t(0));
      if (!topLevel)
        return topLevel.takeError();
      llvm::Expected<int64_t> original =
          readRope.positiveInt("original_max_position_embeddings",
                               *topLevel ? *topLevel : c.maxPositionEmbeddings);
      if (!original)
        return original.takeError();
      if (*topLevel && *original != *topLevel)
        return configError(
            source,
            llvm::formatv("field '{0}.original_max_position_embeddings' is "
                          "{1}, but the top-level "
                          "'original_max_position_embeddings' is {2}",
                          key, *original, *topLevel)
                .str());
      scaling.originalMaxPositionEmbeddings = *original;
      if (Status status = rt::checkRopeScaling(scaling); !status)
        return configError(source, key + ": " + status.message());
    }
    if (scalingFrom && scaling != c.ropeScaling)
      return configError(source, "fields '" + *scalingFrom + "' and '" + key +
                                     "' describe different rotary "
                                     "embeddings");
    scalingFrom = key.str();
    c.ropeScaling = scaling;
  }

  if (llvm::Error e = c.verify())
    return configError(source, llvm::toString(std::move(e)));
  return c;
}

llvm::Expected<LlamaConfig> mlt::readHFLlamaConfig(llvm::StringRef path) {
  // (an HF model directory by the rule every tool takes one by)
  StatusOr<std::string> config = hfConfigPath(path.str());
  if (!config)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   config.status().message());
  const std::string &file = *config;
  // Not a file (a FIFO would block the read): say what it is.
  llvm::sys::fs::file_status status;
  if (!llvm::sys::fs::status(file, status) &&
      status.type() != llvm::sys::fs::file_type::regular_file)
    return configError(file, status.type() ==
                                     llvm::sys::fs::file_type::fifo_file
                                 ? "is a FIFO (named pipe), not a file"
                                 : "is not a regular file");
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
      llvm::MemoryBuffer::getFile(file, /*IsText=*/true);
  if (!buffer)
    return configError(file, "cannot read: " + buffer.getError().message());
  return parseHFLlamaConfig((*buffer)->getBuffer(), file);
}

//===----------------------------------------------------------------------===//
// IR builder
//===----------------------------------------------------------------------===//

namespace {

/// Builds the ops of one model; keeps the builder, types and parameters at hand.
class LlamaModuleBuilder {
public:
  LlamaModuleBuilder(MLIRContext &context, const LlamaConfig &config,
                     Type elementType)
      : b(&context), c(config), elementType(elementType),
        loc(b.getUnknownLoc()) {}

  OwningOpRef<ModuleOp> build() {
    OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
    (*module)->setAttr(MLTDialect::getModelAttrName(),
                       c.toAttr(b.getContext()));
    b.setInsertionPointToEnd(module->getBody());

    int64_t h = c.hiddenSize, qDim = c.numHeads * c.headDim,
            kvDim = c.numKvHeads * c.headDim, ffn = c.intermediateSize;
    param("model.embed_tokens.weight", {c.vocabSize, h});
    layerParam("input_layernorm.weight", {h});
    layerParam("self_attn.q_proj.weight", {qDim, h});
    layerParam("self_attn.k_proj.weight", {kvDim, h});
    layerParam("self_attn.v_proj.weight", {kvDim, h});
    layerParam("self_attn.o_proj.weight", {h, qDim});
    layerParam("post_attention_layernorm.weight", {h});
    layerParam("mlp.gate_proj.weight", {ffn, h});
    layerParam("mlp.up_proj.weight", {ffn, h});
    layerParam("mlp.down_proj.weight", {h, ffn});
    param("model.norm.weight", {h});
    if (!c.tieWordEmbeddings)
      param("lm_head.weight", {c.vocabSize, h});

    auto tokensType =
        RankedTensorType::get({ShapedType::kDynamic, ShapedType::kDynamic},
                              b.getI32Type());
    Type lossType = RankedTensorType::get(
        {}, elementType.isF64() ? Type(b.getF64Type()) : b.getF32Type());
    auto func = func::FuncOp::create(b, 
        loc, "forward",
        b.getFunctionType({tokensType, tokensType}, {lossType}));
    Block *entry = func.addEntryBlock();
    b.setInsertionPointToStart(entry);
    Value tokens = entry->getArgument(0), labels = entry->getArgument(1);

    Value table = load("model.embed_tokens.weight");
    Value x = EmbeddingOp::create(b, loc, tokens, table);
    auto repeat = RepeatOp::create(b, loc, 0, c.numLayers, ValueRange{x});
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&repeat.getBodyBlock());
      Value out = decoderLayer(repeat.getIterArgs()[0], repeat.getLayerIndex());
      YieldOp::create(b, loc, ValueRange{out});
    }
    Value normed = rmsNorm(repeat.getResult(0), load("model.norm.weight"));
    Value head = load(c.tieWordEmbeddings ? "model.embed_tokens.weight"
                                          : "lm_head.weight");
    Value logits = linear(normed, head);
    Value loss = CrossEntropyOp::create(b, loc, logits, labels);
    func::ReturnOp::create(b, loc, loss);
    return module;
  }

private:
  static std::string layerName(llvm::StringRef suffix) {
    return ("model.layers.{}." + suffix).str();
  }

  RankedTensorType tensor(ArrayRef<int64_t> shape) {
    return RankedTensorType::get(shape, elementType);
  }

  void param(llvm::StringRef name, ArrayRef<int64_t> shape) {
    ParamOp::create(b, loc, b.getStringAttr(name), TypeAttr::get(tensor(shape)),
                      /*layers=*/nullptr, /*first_layer=*/nullptr);
    paramTypes[name] = tensor(shape);
  }

  void layerParam(llvm::StringRef suffix, ArrayRef<int64_t> shape) {
    std::string name = layerName(suffix);
    ParamOp::create(b, loc, b.getStringAttr(name), TypeAttr::get(tensor(shape)),
                      b.getI64IntegerAttr(c.numLayers),
                      /*first_layer=*/nullptr);
    paramTypes[name] = tensor(shape);
  }

  Value load(llvm::StringRef name, Value layer = nullptr) {
    return LoadOp::create(b, loc, paramTypes.lookup(name),
                            FlatSymbolRefAttr::get(b.getContext(), name), layer);
  }

  Value layerLoad(llvm::StringRef suffix, Value layer) {
    return load(layerName(suffix), layer);
  }

  Value rmsNorm(Value x, Value weight) {
    return RMSNormOp::create(b, loc, x, weight,
                               b.getF64FloatAttr(c.rmsNormEps));
  }

  /// x @ w^T for an HF weight [out, in].
  Value linear(Value x, Value weight) {
    return MatmulOp::create(b, loc, x, weight, /*transpose_lhs=*/false,
                              /*transpose_rhs=*/true);
  }

  /// [b, s, heads * head_dim] <-> [b, s, heads, head_dim].
  Value splitHeads(Value x, int64_t heads) {
    return ReshapeOp::create(b, 
        loc,
        tensor({ShapedType::kDynamic, ShapedType::kDynamic, heads, c.headDim}),
        x);
  }

  Value decoderLayer(Value h, Value layer) {
    Value n = rmsNorm(h, layerLoad("input_layernorm.weight", layer));
    Value q = linear(n, layerLoad("self_attn.q_proj.weight", layer));
    Value k = linear(n, layerLoad("self_attn.k_proj.weight", layer));
    Value v = linear(n, layerLoad("self_attn.v_proj.weight", layer));
    FloatAttr theta = b.getF64FloatAttr(c.ropeTheta);
    Llama3RopeScalingAttr scaling =
        c.ropeScaling.isScaled()
            ? Llama3RopeScalingAttr::get(b.getContext(), c.ropeScaling)
            : Llama3RopeScalingAttr();
    Value qr =
        RopeOp::create(b, loc, splitHeads(q, c.numHeads), theta, scaling);
    Value kr =
        RopeOp::create(b, loc, splitHeads(k, c.numKvHeads), theta, scaling);
    Value attn = AttentionOp::create(b, 
        loc, qr, kr, splitHeads(v, c.numKvHeads), /*causal=*/b.getUnitAttr(),
        b.getF64FloatAttr(1.0 / std::sqrt(static_cast<double>(c.headDim))));
    Value merged = ReshapeOp::create(b, 
        loc,
        tensor({ShapedType::kDynamic, ShapedType::kDynamic,
                c.numHeads * c.headDim}),
        attn);
    Value o = linear(merged, layerLoad("self_attn.o_proj.weight", layer));
    Value h1 = AddOp::create(b, loc, h, o);
    Value n2 = rmsNorm(h1, layerLoad("post_attention_layernorm.weight", layer));
    Value gate = linear(n2, layerLoad("mlp.gate_proj.weight", layer));
    Value up = linear(n2, layerLoad("mlp.up_proj.weight", layer));
    Value act = SwiGLUOp::create(b, loc, gate, up);
    Value down = linear(act, layerLoad("mlp.down_proj.weight", layer));
    return AddOp::create(b, loc, h1, down);
  }

  OpBuilder b;
  const LlamaConfig &c;
  Type elementType;
  Location loc;
  llvm::StringMap<RankedTensorType> paramTypes;
};

} // namespace

llvm::Expected<OwningOpRef<ModuleOp>>
mlt::buildLlamaModule(MLIRContext &context, const LlamaConfig &config,
                      const LlamaBuildOptions &options) {
  if (llvm::Error e = config.verify())
    return std::move(e);
  context.getOrLoadDialect<MLTDialect>();
  context.getOrLoadDialect<func::FuncDialect>();
  Builder b(&context);
  Type elementType = llvm::StringSwitch<Type>(options.dtype)
                         .Case("f32", b.getF32Type())
                         .Case("bf16", b.getBF16Type())
                         .Case("f16", b.getF16Type())
                         .Case("f64", b.getF64Type())
                         .Default(nullptr);
  if (!elementType)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "unknown dtype '" + options.dtype +
                                       "' (expected f32, bf16, f16 or f64)");
  OwningOpRef<ModuleOp> module =
      LlamaModuleBuilder(context, config, elementType).build();
  if (failed(mlir::verify(*module)))
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "the built LLaMA module does not verify");
  return module;
}
