#include "engine/tensor/subgraph.h"

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <string>
#include <unordered_map>

namespace tiny {

Tensor placeholder(const Shape& shape, DType dtype, int index) {
  NodeArgs a;
  a.value = Scalar::from_int(index);
  return Tensor(make_node(Op::Placeholder, dtype, shape, {}, std::move(a)));
}

std::shared_ptr<const Subgraph> make_subgraph(std::vector<Tensor> inputs, const std::vector<Tensor>& outputs) {
  static std::atomic<uint64_t> next_id{0};
  auto fn = std::make_shared<Subgraph>();
  fn->id = next_id++;
  for (size_t k = 0; k < inputs.size(); k++) {
    const Node& p = *inputs[k].node();
    if (p.op != Op::Placeholder || p.args.value.to_int() != int64_t(k))
      throw std::logic_error("tiny engine: subgraph input " + std::to_string(k) + " is " + p.str());
    fn->inputs.push_back(inputs[k].node());
  }
  std::vector<NodeRef> targets;
  for (auto& o : outputs) targets.push_back(o.node());
  for (const Node* n : toposort(targets)) {
    const bool leaf = n->src.empty();
    if (n->op == Op::Placeholder) {
      const size_t k = size_t(n->args.value.to_int());
      if (k >= fn->inputs.size() || fn->inputs[k].get() != n)
        throw std::logic_error("tiny engine: a subgraph reads a placeholder it does not take: " + n->str());
      continue;
    }
    if (n->op == Op::Call || n->op == Op::CallOutput || (leaf && n->op != Op::Const && n->op != Op::Arange))
      throw std::logic_error("tiny engine: a subgraph reads " + n->str() + ", not one of its inputs");
    for (auto& s : n->src)
      if (s->realized())
        throw std::logic_error("tiny engine: a subgraph reads the stored value " + s->str() + ", not one of its inputs");
    fn->order.push_back(n->shared_from_this());
  }
  fn->outputs = std::move(targets);
  return fn;
}

std::vector<Tensor> call(const std::shared_ptr<const Subgraph>& fn, const std::vector<Tensor>& args,
                         const std::vector<NodeRef>& context) {
  if (args.size() != fn->inputs.size())
    throw std::invalid_argument("tiny engine: a call of a subgraph of " + std::to_string(fn->inputs.size()) +
                                " inputs with " + std::to_string(args.size()));
  Sources src;
  for (size_t k = 0; k < args.size(); k++) {
    const Node& p = *fn->inputs[k];
    if (args[k].dtype() != p.dtype || args[k].shape() != p.shape)
      throw std::invalid_argument("tiny engine: subgraph input " + std::to_string(k) + " is " + p.str() +
                                  ", the call passes " + args[k].node()->str());
    src.push_back(args[k].node());
  }
  // A context's values were computed from its arguments: its subgraph's inputs must be fn's first
  // ones, given the same values.
  for (const NodeRef& c : context) {
    if (c->op != Op::Call) throw std::invalid_argument("tiny engine: a call's context must be calls, not " + c->str());
    const Subgraph& other = *c->args.subgraph;
    bool same = other.inputs.size() <= fn->inputs.size();
    for (size_t k = 0; same && k < other.inputs.size(); k++)
      same = other.inputs[k] == fn->inputs[k] && c->src[k] == src[k];
    if (!same)
      throw std::invalid_argument("tiny engine: a call's context must take the call's first inputs and arguments");
    src.push_back(c);
  }
  NodeArgs a;
  a.subgraph = fn;
  NodeRef c = make_node(Op::Call, DType::Bool, {}, std::move(src), std::move(a));
  std::vector<Tensor> out;
  for (size_t k = 0; k < fn->outputs.size(); k++) {
    NodeArgs o;
    o.value = Scalar::from_int(int64_t(k));
    out.emplace_back(make_node(Op::CallOutput, fn->outputs[k]->dtype, fn->outputs[k]->shape, {c}, std::move(o)));
  }
  return out;
}

const NodeRef& call_of(const Tensor& output) {
  const Node& n = *output.node();
  if (n.op != Op::CallOutput || n.src.empty()) throw std::invalid_argument("tiny engine: not a call's output: " + n.str());
  return n.src[0];
}

namespace {

// The outputs of `call` (a node of the given graph) built over `args` (the images of its
// arguments), each node made as a node of the calling graph (its origin the subgraph's, its
// module path the call's); values kept for the call or its context are read from their
// buffers. `insides` gets each node made and the subgraph's node it stands for.
std::vector<NodeRef> instantiate(const Node& call, const Sources& args, const std::string* scope,
                                 std::vector<std::pair<NodeRef, const Node*>>& insides) {
  const Subgraph& fn = *call.args.subgraph;
  std::unordered_map<const Node*, NodeRef> image;
  for (size_t k = 0; k < fn.inputs.size(); k++) image.emplace(fn.inputs[k].get(), args[k]);
  std::vector<const Node*> keepers{&call};  // the call, then its context
  for (size_t k = fn.inputs.size(); k < call.src.size(); k++) keepers.push_back(call.src[k].get());
  std::unordered_map<const Node*, BufferRef> kept;
  for (const Node* c : keepers)
    for (const StoredValue& v : stored_values(c)) kept.emplace(v.node, v.buffer);
  for (const NodeRef& node : fn.order) {
    const Node* n = node.get();
    if (auto it = kept.find(n); it != kept.end()) {
      image.emplace(n, Tensor::from_buffer(it->second, n->shape).node());
      continue;
    }
    if (n->src.empty()) continue;  // a constant (or a value a graph realized since: its buffer)
    std::vector<NodeRef> src;
    for (auto& s : n->src) {
      auto it = image.find(s.get());
      src.push_back(it == image.end() ? s : it->second);
    }
    set_origin(n->origin);
    set_scope(scope);
    // a view through view(), which merges it into a view of the argument
    NodeRef made = n->op == Op::View ? Tensor(src[0]).view(n->args.st).node()
                                     : make_node(n->op, n->dtype, n->shape, Sources(src.begin(), src.end()), n->args);
    insides.emplace_back(made, n);
    image.emplace(n, std::move(made));
  }
  std::vector<NodeRef> outputs;
  for (auto& o : fn.outputs) {
    auto it = image.find(o.get());
    outputs.push_back(it == image.end() ? o : it->second);
  }
  return outputs;
}

}  // namespace

GraphRewrite expand_calls(const std::vector<NodeRef>& targets) {
  std::vector<const Node*> order = toposort(targets);
  bool calls = false;
  for (const Node* n : order) {
    if (n->op == Op::Placeholder) throw std::logic_error("tiny engine: a graph to realize reads a placeholder");
    calls |= n->op == Op::Call;
  }
  if (!calls) return GraphRewrite{targets, {}, {}};
  std::unordered_map<const Node*, std::vector<NodeRef>> outputs;  // of each call, by the call's image
  std::vector<std::pair<const Node*, std::vector<std::pair<NodeRef, const Node*>>>> insides;  // by call
  GraphRewrite rewrite =
      rewrite_graph(targets, order, [&](const Node& n, const std::vector<NodeRef>& src) -> std::optional<Tensor> {
        if (n.op != Op::CallOutput) return std::nullopt;
        const Node& c = *src[0];
        auto it = outputs.find(&c);
        if (it == outputs.end()) {
          insides.emplace_back(n.src[0].get(), std::vector<std::pair<NodeRef, const Node*>>());
          it = outputs.emplace(&c, instantiate(*n.src[0], c.src, n.scope, insides.back().second)).first;
        }
        return Tensor(it->second[size_t(n.args.value.to_int())]);
      });
  // A node two calls made (a backward's copy of its forward's) counts as inside the one that keeps
  // its values.
  for (auto& [call, made] : insides) {
    const bool keeps = keeps_stored_values(call);
    for (auto& [image, node] : made) {
      auto [at, added] = rewrite.insides.emplace(image.get(), std::make_pair(call, node));
      if (!added && keeps && !keeps_stored_values(at->second.first)) at->second = {call, node};
    }
  }
  return rewrite;
}

}  // namespace tiny
