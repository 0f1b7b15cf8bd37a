// libFuzzer target: arbitrary bytes through the GGUF reader, then through everything that consumes
// a parsed file: model config and weight binding (and one forward step when a model binds), and the
// vocabulary (encode, decode of every token). Any crash, sanitizer report or leak is a bug.
#include <cstddef>
#include <cstdint>

#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "model/config.h"
#include "model/model.h"
#include "tokenizer/vocab.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = coda::GgufFile::parse(data, size);
  if (!f.ok()) return 0;
  (void)coda::read_model_config(*f);
  auto v = coda::Vocab::from_gguf(*f);
  if (v.ok()) {
    auto ids = v->encode("In the beginning \xE2\x96\x81 <s>", true);
    if (ids.ok()) (void)v->decode(*ids);
    std::vector<int32_t> all;
    for (int32_t id = 0; id < v->size() && id < 512; ++id) all.push_back(id);
    (void)v->decode(all);
  }
  auto m = coda::Model::from_gguf(*f);
  if (m.ok()) {
    static coda::ThreadPool pool(1);
    auto kv_or = coda::KvCache::create((*m)->config(), 2);
    if (!kv_or.ok()) return 0;
    coda::KvCache& kv = *kv_or;
    coda::ForwardBuffers buf;
    std::vector<float> logits(static_cast<size_t>((*m)->config().n_vocab));
    const int32_t toks[2] = {0, 1 % static_cast<int32_t>((*m)->config().n_vocab)};
    (void)(*m)->forward(toks, 2, kv, pool, buf, logits.data(), false);
  }
  for (const auto& t : f->tensors()) {
    volatile uint8_t sink = 0;
    if (t.n_bytes > 0) sink = static_cast<uint8_t>(t.data[0] + t.data[t.n_bytes - 1]);
    (void)sink;
  }
  return 0;
}
