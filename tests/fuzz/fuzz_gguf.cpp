// libFuzzer target: arbitrary bytes through the GGUF reader, then through the model-config and
// vocabulary readers that consume its metadata. Any crash, sanitizer report or leak is a bug.
#include <cstddef>
#include <cstdint>

#include "gguf/gguf.h"
#include "model/config.h"
#include "tokenizer/vocab.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = coda::GgufFile::parse(data, size);
  if (!f.ok()) return 0;
  (void)coda::read_model_config(*f);
  auto v = coda::Vocab::from_gguf(*f);
  if (v.ok()) {
    auto ids = v->encode("In the beginning \xE2\x96\x81 <s>", true);
    if (ids.ok()) (void)v->decode(*ids);
  }
  for (const auto& t : f->tensors()) {
    volatile uint8_t sink = 0;
    if (t.n_bytes > 0) sink = static_cast<uint8_t>(t.data[0] + t.data[t.n_bytes - 1]);
    (void)sink;
  }
  return 0;
}
