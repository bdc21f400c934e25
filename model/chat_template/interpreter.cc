#include "model/chat_template/interpreter.h"

#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/chat_template/builtins.h"

namespace tandem::jinja {
namespace {

struct Frame {
  absl::flat_hash_map<std::string, Value> vars;
  std::shared_ptr<Frame> parent;
};
using FramePtr = std::shared_ptr<Frame>;

enum class Flow { kNormal, kBreak, kContinue };

bool IsRaised(const absl::Status& s) { return s.GetPayload(kRaisedPayload).has_value(); }

bool HasLine(const absl::Status& s) { return absl::StartsWith(s.message(), "line "); }

class Interpreter {
 public:
  Interpreter(const std::tm& now, const RenderLimits& limits) : now_(now), limits_(limits) {}

  absl::StatusOr<std::string> Run(const Body& body, const Map& variables) {
    const BuiltLimitsScope built_limits(limits_.max_built_bytes, limits_.max_built_items);
    auto globals = std::make_shared<Frame>();
    DefineGlobals(globals.get());
    auto context = std::make_shared<Frame>();
    context->parent = globals;
    for (const auto& [k, v] : variables.entries()) {
      if (k.is_string()) context->vars[k.str()] = v;
    }
    auto root = std::make_shared<Frame>();
    root->parent = context;
    std::string out;
    const absl::StatusOr<Flow> flow = ExecBody(body, root, &out);
    // Nothing may outlive the render, whether it succeeded or not. Frames may hold macros that
    // point back at them, and a namespace may hold itself (`set ns.x = ns`, or a list or loop
    // that contains it): shared pointers in a cycle, never freed. Namespaces are the only values
    // a template can change after making them, so every cycle runs through one, and emptying
    // them all breaks every cycle.
    for (const FramePtr& f : {root, context, globals}) f->vars.clear();
    for (const Value& ns : namespaces_) ns.object().attrs = Map();
    namespaces_.clear();
    if (!flow.ok()) return flow.status();
    return out;
  }

 private:
  // ---- globals -------------------------------------------------------------------------------
  void DefineGlobals(Frame* f) {
    f->vars["range"] = Value::Function("range", [this](const CallArgs& a) { return Range(a); });
    f->vars["dict"] = Value::Function("dict", [](const CallArgs& a) -> absl::StatusOr<Value> {
      Map m;
      if (a.args.size() > 1) return TypeError("dict expected at most 1 argument");
      if (a.args.size() == 1) {
        const Value& src = a.args[0];
        if (src.is_map()) {
          m = src.map();
        } else {
          TANDEM_ASSIGN_OR_RETURN(const std::vector<Value> pairs, Iterate(src));
          for (const Value& p : pairs) {
            TANDEM_ASSIGN_OR_RETURN(const std::vector<Value> kv, Iterate(p));
            if (kv.size() != 2 || !IsHashable(kv[0])) {
              return TypeError("dict(): expected (key, value) pairs with hashable keys");
            }
            m.SetKey(kv[0], kv[1]);
          }
        }
      }
      for (const auto& [k, v] : a.kwargs) m.Set(k, v);
      return Value::Dict(std::move(m));
    });
    f->vars["namespace"] =
        Value::Function("namespace", [this](const CallArgs& a) -> absl::StatusOr<Value> {
          Map m;
          if (a.args.size() > 1) return TypeError("namespace expected at most 1 argument");
          if (a.args.size() == 1) {
            if (!a.args[0].is_map()) return TypeError("namespace() takes a dict");
            m = a.args[0].map();
          }
          for (const auto& [k, v] : a.kwargs) m.Set(k, v);
          namespaces_.push_back(Value::MakeObject(ObjectKind::kNamespace, std::move(m)));
          return namespaces_.back();
        });
    f->vars["raise_exception"] =
        Value::Function("raise_exception", [](const CallArgs& a) -> absl::StatusOr<Value> {
          TANDEM_ASSIGN_OR_RETURN(const std::vector<Value> v,
                                  BindArgs("raise_exception", a, {{"message", std::nullopt}}));
          TANDEM_ASSIGN_OR_RETURN(const std::string msg, ToStr(v[0]));
          // An error the client sees always says something, even when the template says nothing.
          absl::Status s = absl::InvalidArgumentError(
              msg.empty() ? "the chat template raised an exception with an empty message" : msg);
          s.SetPayload(kRaisedPayload, absl::Cord("1"));
          return s;
        });
    f->vars["strftime_now"] =
        Value::Function("strftime_now", [this](const CallArgs& a) -> absl::StatusOr<Value> {
          TANDEM_ASSIGN_OR_RETURN(const std::vector<Value> v,
                                  BindArgs("strftime_now", a, {{"format", std::nullopt}}));
          if (!v[0].is_string()) return TypeError("strftime_now() argument must be str");
          if (v[0].str().empty()) return Value("");
          char buf[512];
          const size_t n = std::strftime(buf, sizeof(buf), v[0].str().c_str(), &now_);
          if (n == 0) return absl::InvalidArgumentError("strftime_now: format too long");
          return Value(std::string(buf, n));
        });
  }

  absl::StatusOr<Value> Range(const CallArgs& a) {
    if (!a.kwargs.empty()) return TypeError("range() takes no keyword arguments");
    if (a.args.empty() || a.args.size() > 3) return TypeError("range expected 1 to 3 arguments");
    for (const Value& v : a.args) {
      if (!v.is_integral()) {
        return TypeError(
            absl::StrCat("'", TypeName(v), "' object cannot be interpreted as an integer"));
      }
    }
    int64_t start = 0, stop, step = 1;
    if (a.args.size() == 1) {
      stop = a.args[0].as_int();
    } else {
      start = a.args[0].as_int();
      stop = a.args[1].as_int();
      if (a.args.size() == 3) step = a.args[2].as_int();
    }
    if (step == 0) return absl::InvalidArgumentError("ValueError: range() arg 3 must not be zero");
    std::vector<Value> items;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (static_cast<int64_t>(items.size()) >= limits_.max_range) {
        return absl::InvalidArgumentError(
            absl::StrCat("range() longer than ", limits_.max_range, " items"));
      }
      items.emplace_back(i);
    }
    return Value::Seq(std::move(items), SeqKind::kRange);
  }

  // ---- statements ----------------------------------------------------------------------------
  absl::StatusOr<Flow> ExecBody(const Body& body, const FramePtr& frame, std::string* out) {
    for (const StmtPtr& s : body) {
      if (++steps_ > limits_.max_steps) {
        return absl::InvalidArgumentError(absl::StrCat(
            "line ", s->line, ": the template ran more than ", limits_.max_steps, " statements"));
      }
      absl::StatusOr<Flow> flow = Exec(*s, frame, out);
      if (!flow.ok()) {
        if (IsRaised(flow.status()) || HasLine(flow.status())) return flow.status();
        absl::Status annotated(flow.status().code(),
                               absl::StrCat("line ", s->line, ": ", flow.status().message()));
        return annotated;
      }
      if (*flow != Flow::kNormal) return *flow;
      if (out->size() > limits_.max_output_bytes) {
        return absl::InvalidArgumentError(absl::StrCat("line ", s->line, ": output longer than ",
                                                       limits_.max_output_bytes, " bytes"));
      }
    }
    return Flow::kNormal;
  }

  static FramePtr Child(const FramePtr& parent) {
    auto f = std::make_shared<Frame>();
    f->parent = parent;
    return f;
  }

  absl::StatusOr<Flow> Exec(const Stmt& s, const FramePtr& frame, std::string* out) {
    switch (s.kind) {
      case StmtKind::kData:
        out->append(s.text);
        return Flow::kNormal;
      case StmtKind::kOutput: {
        TANDEM_ASSIGN_OR_RETURN(const Value v, Eval(*s.expr, frame));
        TANDEM_ASSIGN_OR_RETURN(const std::string text, ToStr(v));
        out->append(text);
        return Flow::kNormal;
      }
      case StmtKind::kIf: {
        TANDEM_ASSIGN_OR_RETURN(const Value test, Eval(*s.expr, frame));
        return ExecBody(Truthy(test) ? s.body : s.else_body, frame, out);
      }
      case StmtKind::kFor:
        return ExecFor(s, frame, out);
      case StmtKind::kSet: {
        TANDEM_ASSIGN_OR_RETURN(const Value v, Eval(*s.expr, frame));
        TANDEM_RETURN_IF_ERROR(Assign(*s.target, v, frame));
        return Flow::kNormal;
      }
      case StmtKind::kSetBlock: {
        std::string text;
        TANDEM_RETURN_IF_ERROR(ExecBody(s.body, Child(frame), &text).status());
        Value v(std::move(text));
        if (s.expr) {
          TANDEM_ASSIGN_OR_RETURN(v, ApplyFilterChain(*s.expr, v, frame));
        }
        TANDEM_RETURN_IF_ERROR(Assign(*s.target, v, frame));
        return Flow::kNormal;
      }
      case StmtKind::kMacro:
        frame->vars[s.name] = MakeMacro(s, frame);
        return Flow::kNormal;
      case StmtKind::kCallBlock: {
        const Value caller = MakeCaller(s, frame);
        TANDEM_ASSIGN_OR_RETURN(const Value v, EvalCall(*s.expr, frame, &caller));
        TANDEM_ASSIGN_OR_RETURN(const std::string text, ToStr(v));
        out->append(text);
        return Flow::kNormal;
      }
      case StmtKind::kFilterBlock: {
        std::string text;
        TANDEM_RETURN_IF_ERROR(ExecBody(s.body, Child(frame), &text).status());
        TANDEM_ASSIGN_OR_RETURN(const Value v,
                                ApplyFilterChain(*s.expr, Value(std::move(text)), frame));
        TANDEM_ASSIGN_OR_RETURN(const std::string filtered, ToStr(v));
        out->append(filtered);
        return Flow::kNormal;
      }
      case StmtKind::kWith: {
        std::vector<Value> values;
        for (const ExprPtr& e : s.values) {
          TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*e, frame));
          values.push_back(std::move(v));
        }
        FramePtr inner = Child(frame);
        for (size_t i = 0; i < s.targets.size(); ++i) {
          TANDEM_RETURN_IF_ERROR(Assign(*s.targets[i], values[i], inner));
        }
        return ExecBody(s.body, inner, out);
      }
      case StmtKind::kBreak:
        return Flow::kBreak;
      case StmtKind::kContinue:
        return Flow::kContinue;
      case StmtKind::kScope:
        return ExecBody(s.body, Child(frame), out);
    }
    return Flow::kNormal;
  }

  absl::StatusOr<Flow> ExecFor(const Stmt& s, const FramePtr& frame, std::string* out) {
    TANDEM_ASSIGN_OR_RETURN(const Value iterable, Eval(*s.expr, frame));
    TANDEM_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(iterable));
    if (s.cond) {
      std::vector<Value> kept;
      for (const Value& item : items) {
        FramePtr f = Child(frame);
        TANDEM_RETURN_IF_ERROR(Assign(*s.target, item, f));
        TANDEM_ASSIGN_OR_RETURN(const Value test, Eval(*s.cond, f));
        if (Truthy(test)) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      if (s.else_body.empty()) return Flow::kNormal;
      TANDEM_ASSIGN_OR_RETURN(const Flow flow, ExecBody(s.else_body, Child(frame), out));
      return flow;
    }
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      FramePtr f = Child(frame);
      TANDEM_RETURN_IF_ERROR(Assign(*s.target, items[static_cast<size_t>(i)], f));
      Map loop;
      loop.Set("index", Value(i + 1));
      loop.Set("index0", Value(i));
      loop.Set("revindex", Value(n - i));
      loop.Set("revindex0", Value(n - i - 1));
      loop.Set("first", Value(i == 0));
      loop.Set("last", Value(i == n - 1));
      loop.Set("length", Value(n));
      loop.Set("depth", Value(1));
      loop.Set("depth0", Value(0));
      loop.Set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)]
                                 : Value::Undefined("there is no previous item"));
      loop.Set("nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)]
                                     : Value::Undefined("there is no next item"));
      loop.Set("cycle",
               Value::Function("loop.cycle", [i](const CallArgs& a) -> absl::StatusOr<Value> {
                 if (a.args.empty()) return TypeError("no items for cycling given");
                 return a.args[static_cast<size_t>(i) % a.args.size()];
               }));
      f->vars["loop"] = Value::MakeObject(ObjectKind::kLoop, std::move(loop));
      TANDEM_ASSIGN_OR_RETURN(const Flow flow, ExecBody(s.body, f, out));
      if (flow == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  absl::Status Assign(const Expr& target, const Value& v, const FramePtr& frame) {
    switch (target.kind) {
      case ExprKind::kName:
        frame->vars[target.name] = v;
        return absl::OkStatus();
      case ExprKind::kTuple: {
        TANDEM_ASSIGN_OR_RETURN(const std::vector<Value> items, Iterate(v));
        if (items.size() != target.items.size()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "ValueError: ", items.size() < target.items.size() ? "not enough" : "too many",
              " values to unpack (expected ", target.items.size(), ", got ", items.size(), ")"));
        }
        for (size_t i = 0; i < items.size(); ++i) {
          TANDEM_RETURN_IF_ERROR(Assign(*target.items[i], items[i], frame));
        }
        return absl::OkStatus();
      }
      case ExprKind::kNsRef: {
        const Value ns = Lookup(target.name, frame);
        if (!ns.is_object() || ns.object().kind != ObjectKind::kNamespace) {
          return absl::InvalidArgumentError(
              "TemplateRuntimeError: cannot assign attribute on non-namespace object");
        }
        ns.object().attrs.Set(target.attr, v);
        return absl::OkStatus();
      }
      default:
        return absl::InvalidArgumentError("can't assign to this target");
    }
  }

  // ---- macros --------------------------------------------------------------------------------
  Value MakeMacro(const Stmt& s, const FramePtr& frame) {
    std::weak_ptr<Frame> defining = frame;
    const Stmt* stmt = &s;
    return Value::Function(s.name, [this, stmt, defining](const CallArgs& a) {
      return CallMacro(*stmt, defining, a);
    });
  }

  Value MakeCaller(const Stmt& s, const FramePtr& frame) {
    std::weak_ptr<Frame> defining = frame;
    const Stmt* stmt = &s;
    return Value::Function("caller", [this, stmt, defining](const CallArgs& a) {
      return CallMacro(*stmt, defining, a);
    });
  }

  absl::StatusOr<Value> CallMacro(const Stmt& s, const std::weak_ptr<Frame>& defining,
                                  const CallArgs& a) {
    const FramePtr parent = defining.lock();
    if (parent == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("macro '", s.name, "' called after its defining scope ended"));
    }
    if (depth_ >= limits_.max_call_depth) {
      return absl::InvalidArgumentError("RecursionError: macro calls nested too deeply");
    }
    const std::string what =
        s.kind == StmtKind::kMacro ? absl::StrCat("macro '", s.name, "'") : std::string("caller");
    FramePtr f = Child(parent);
    const size_t np = s.params.size();
    if (a.args.size() > np && !s.uses_varargs) {
      return TypeError(absl::StrCat(what, " takes not more than ", np, " argument(s)"));
    }
    std::vector<bool> given(np, false);
    for (size_t i = 0; i < a.args.size() && i < np; ++i) {
      f->vars[s.params[i]] = a.args[i];
      given[i] = true;
    }
    Map extra_kwargs;
    for (const auto& [k, v] : a.kwargs) {
      size_t i = 0;
      while (i < np && s.params[i] != k) ++i;
      if (i < np) {
        if (given[i])
          return TypeError(absl::StrCat(what, " got multiple values for argument '", k, "'"));
        f->vars[k] = v;
        given[i] = true;
      } else if (k == "caller" && s.uses_caller) {
        f->vars["caller"] = v;
      } else if (s.uses_kwargs) {
        extra_kwargs.Set(k, v);
      } else {
        return TypeError(absl::StrCat(what, " takes no keyword argument '", k, "'"));
      }
    }
    const size_t first_default = np - s.defaults.size();
    for (size_t i = 0; i < np; ++i) {
      if (given[i]) continue;
      if (i >= first_default) {
        TANDEM_ASSIGN_OR_RETURN(f->vars[s.params[i]], Eval(*s.defaults[i - first_default], f));
      } else {
        f->vars[s.params[i]] =
            Value::Undefined(absl::StrCat("parameter '", s.params[i], "' was not provided"));
      }
    }
    if (s.uses_varargs) {
      std::vector<Value> rest;
      for (size_t i = np; i < a.args.size(); ++i) rest.push_back(a.args[i]);
      f->vars["varargs"] = Value::Seq(std::move(rest), SeqKind::kTuple);
    }
    if (s.uses_kwargs) f->vars["kwargs"] = Value::Dict(std::move(extra_kwargs));
    std::string text;
    ++depth_;
    absl::StatusOr<Flow> flow = ExecBody(s.body, f, &text);
    --depth_;
    f->vars.clear();
    if (!flow.ok()) return flow.status();
    return Value(std::move(text));
  }

  // ---- expressions ---------------------------------------------------------------------------
  static Value Lookup(const std::string& name, const FramePtr& frame) {
    for (const Frame* f = frame.get(); f != nullptr; f = f->parent.get()) {
      const auto it = f->vars.find(name);
      if (it != f->vars.end()) return it->second;
    }
    return Value::Undefined(absl::StrCat("'", name, "' is undefined"));
  }

  absl::Status EvalArgs(const Expr& e, const FramePtr& frame, CallArgs* out) {
    for (const ExprPtr& arg : e.items) {
      TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*arg, frame));
      out->args.push_back(std::move(v));
    }
    for (const Keyword& k : e.kwargs) {
      TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*k.value, frame));
      out->kwargs.emplace_back(k.name, std::move(v));
    }
    if (e.dyn_args) {
      TANDEM_ASSIGN_OR_RETURN(const Value v, Eval(*e.dyn_args, frame));
      TANDEM_ASSIGN_OR_RETURN(const std::vector<Value> items, Iterate(v));
      out->args.insert(out->args.end(), items.begin(), items.end());
    }
    if (e.dyn_kwargs) {
      TANDEM_ASSIGN_OR_RETURN(const Value v, Eval(*e.dyn_kwargs, frame));
      if (!v.is_map()) return TypeError("argument after ** must be a mapping");
      for (const auto& [k, val] : v.map().entries()) {
        if (!k.is_string()) return TypeError("keywords must be strings");
        out->kwargs.emplace_back(k.str(), val);
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Value> EvalCall(const Expr& e, const FramePtr& frame, const Value* caller) {
    TANDEM_ASSIGN_OR_RETURN(const Value fn, Eval(*e.a, frame));
    CallArgs args;
    TANDEM_RETURN_IF_ERROR(EvalArgs(e, frame, &args));
    if (caller != nullptr) args.kwargs.emplace_back("caller", *caller);
    if (fn.is_undefined()) return UndefinedError(fn);
    if (!fn.is_callable()) {
      return TypeError(absl::StrCat("'", TypeName(fn), "' object is not callable"));
    }
    return fn.callable().fn(args);
  }

  // A filter chain whose innermost input is `input` ({% filter %} and {% set x | f %}).
  absl::StatusOr<Value> ApplyFilterChain(const Expr& e, const Value& input, const FramePtr& frame) {
    Value in = input;
    if (e.a) {
      TANDEM_ASSIGN_OR_RETURN(in, ApplyFilterChain(*e.a, input, frame));
    }
    CallArgs args;
    TANDEM_RETURN_IF_ERROR(EvalArgs(e, frame, &args));
    return ApplyFilter(e.name, in, args);
  }

  absl::StatusOr<bool> Compare(const std::string& op, const Value& l, const Value& r) {
    if (op == "==") return Equals(l, r);
    if (op == "!=") return !Equals(l, r);
    if (op == "<") return Less(l, r);
    if (op == ">") return Less(r, l);
    if (op == "<=") {
      if (Equals(l, r) && !l.is_undefined()) return true;
      return Less(l, r);
    }
    if (op == ">=") {
      if (Equals(l, r) && !l.is_undefined()) return true;
      return Less(r, l);
    }
    if (op == "in") return Contains(r, l);
    TANDEM_ASSIGN_OR_RETURN(const bool in, Contains(r, l));
    return !in;
  }

  absl::StatusOr<Value> Eval(const Expr& e, const FramePtr& frame) {
    switch (e.kind) {
      case ExprKind::kConst:
        return e.value;
      case ExprKind::kName:
        return Lookup(e.name, frame);
      case ExprKind::kList:
      case ExprKind::kTuple: {
        std::vector<Value> items;
        for (const ExprPtr& item : e.items) {
          TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*item, frame));
          items.push_back(std::move(v));
        }
        return Value::Seq(std::move(items),
                          e.kind == ExprKind::kList ? SeqKind::kList : SeqKind::kTuple);
      }
      case ExprKind::kDict: {
        Map m;
        for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
          TANDEM_ASSIGN_OR_RETURN(const Value k, Eval(*e.items[i], frame));
          TANDEM_ASSIGN_OR_RETURN(Value v, Eval(*e.items[i + 1], frame));
          if (!IsHashable(k)) {
            return TypeError(absl::StrCat("unhashable type: '", TypeName(k), "'"));
          }
          m.SetKey(k, std::move(v));
        }
        return Value::Dict(std::move(m));
      }
      case ExprKind::kGetattr: {
        TANDEM_ASSIGN_OR_RETURN(const Value obj, Eval(*e.a, frame));
        return GetAttr(obj, e.name);
      }
      case ExprKind::kGetitem: {
        TANDEM_ASSIGN_OR_RETURN(const Value obj, Eval(*e.a, frame));
        if (e.b->kind == ExprKind::kSlice) {
          Value parts[3] = {Value::None(), Value::None(), Value::None()};
          for (size_t i = 0; i < 3; ++i) {
            if (e.b->items[i]) {
              TANDEM_ASSIGN_OR_RETURN(parts[i], Eval(*e.b->items[i], frame));
            }
          }
          return GetSlice(obj, parts[0], parts[1], parts[2]);
        }
        TANDEM_ASSIGN_OR_RETURN(const Value key, Eval(*e.b, frame));
        return GetItem(obj, key);
      }
      case ExprKind::kCall:
        return EvalCall(e, frame, nullptr);
      case ExprKind::kFilter: {
        TANDEM_ASSIGN_OR_RETURN(const Value in, Eval(*e.a, frame));
        CallArgs args;
        TANDEM_RETURN_IF_ERROR(EvalArgs(e, frame, &args));
        return ApplyFilter(e.name, in, args);
      }
      case ExprKind::kTest: {
        TANDEM_ASSIGN_OR_RETURN(const Value in, Eval(*e.a, frame));
        CallArgs args;
        TANDEM_RETURN_IF_ERROR(EvalArgs(e, frame, &args));
        TANDEM_ASSIGN_OR_RETURN(const bool r, ApplyTest(e.name, in, args));
        return Value(r);
      }
      case ExprKind::kNeg: {
        TANDEM_ASSIGN_OR_RETURN(const Value v, Eval(*e.a, frame));
        return Negate(v);
      }
      case ExprKind::kPos: {
        TANDEM_ASSIGN_OR_RETURN(const Value v, Eval(*e.a, frame));
        return UnaryPlus(v);
      }
      case ExprKind::kNot: {
        TANDEM_ASSIGN_OR_RETURN(const Value v, Eval(*e.a, frame));
        return Value(!Truthy(v));
      }
      case ExprKind::kBinary: {
        TANDEM_ASSIGN_OR_RETURN(const Value l, Eval(*e.a, frame));
        TANDEM_ASSIGN_OR_RETURN(const Value r, Eval(*e.b, frame));
        return BinaryOp(e.name, l, r);
      }
      case ExprKind::kConcat: {
        std::string out;
        for (const ExprPtr& item : e.items) {
          TANDEM_ASSIGN_OR_RETURN(const Value v, Eval(*item, frame));
          TANDEM_ASSIGN_OR_RETURN(const std::string s, ToStr(v));
          TANDEM_RETURN_IF_ERROR(CheckBuiltSize(out.size() + s.size()));
          out += s;
        }
        return Value(std::move(out));
      }
      case ExprKind::kCompare: {
        TANDEM_ASSIGN_OR_RETURN(Value left, Eval(*e.a, frame));
        for (size_t i = 0; i < e.ops.size(); ++i) {
          TANDEM_ASSIGN_OR_RETURN(Value right, Eval(*e.items[i], frame));
          TANDEM_ASSIGN_OR_RETURN(const bool ok, Compare(e.ops[i], left, right));
          if (!ok) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case ExprKind::kAnd: {
        TANDEM_ASSIGN_OR_RETURN(const Value l, Eval(*e.a, frame));
        if (!Truthy(l)) return l;
        return Eval(*e.b, frame);
      }
      case ExprKind::kOr: {
        TANDEM_ASSIGN_OR_RETURN(const Value l, Eval(*e.a, frame));
        if (Truthy(l)) return l;
        return Eval(*e.b, frame);
      }
      case ExprKind::kCondExpr: {
        TANDEM_ASSIGN_OR_RETURN(const Value test, Eval(*e.a, frame));
        if (Truthy(test)) return Eval(*e.b, frame);
        if (e.c) return Eval(*e.c, frame);
        return Value::Undefined(
            absl::StrCat("the inline if-expression on line ", e.line,
                         " evaluated to false and no else section was defined."));
      }
      case ExprKind::kSlice:
      case ExprKind::kNsRef:
        break;
    }
    return absl::InvalidArgumentError("unsupported expression");
  }

  const std::tm now_;
  const RenderLimits limits_;
  int depth_ = 0;
  int64_t steps_ = 0;
  std::vector<Value> namespaces_;  // every namespace() of this render, emptied at its end (Run)
};

}  // namespace

bool IsKnownGlobalFunction(absl::string_view name) {
  return name == "range" || name == "dict" || name == "namespace" || name == "raise_exception" ||
         name == "strftime_now";
}

bool IsRefusedGlobal(absl::string_view name) {
  return name == "cycler" || name == "joiner" || name == "lipsum" || name == "self";
}

absl::StatusOr<std::string> Interpret(const Body& body, const Map& variables, const std::tm& now,
                                      const RenderLimits& limits) {
  return Interpreter(now, limits).Run(body, variables);
}

}  // namespace tandem::jinja
