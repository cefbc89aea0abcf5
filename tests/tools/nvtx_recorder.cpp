// A minimal NVTX tool: an injection library loaded the way Nsight Systems is, through the environment
// variable NVTX_INJECTION64_PATH. NVTX's loader calls InitializeInjectionNvtx2 on the first NVTX call; we
// fill the CORE and CORE2 callback tables so every range push and pop (with its domain, its name, registered
// strings resolved, and its payload) is recorded, and write the record at exit to the file named by
// KDAGRAPH_NVTX_RECORD, one event per line:
//   push <thread> <domain> <name> <payload or ->
//   pop <thread> <domain>
// Fields are tab-separated; the default domain is written as "-".
#define NVTX_NO_IMPL
#include <nvtx3/nvToolsExt.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Domain {
  std::string name;
};
struct RegisteredString {
  std::string text;
};

struct Recorder {
  std::mutex mutex;
  std::deque<Domain> domains;            // handles point into these: deque never moves its elements
  std::deque<RegisteredString> strings;
  std::vector<std::string> lines;
};

Recorder& recorder() {
  static Recorder* r = new Recorder;  // never destroyed: callbacks may run during static destruction
  return *r;
}

std::string thread_id() {
  static std::mutex m;
  static std::vector<std::thread::id> seen;
  const std::lock_guard<std::mutex> lock(m);
  const std::thread::id me = std::this_thread::get_id();
  for (size_t i = 0; i < seen.size(); ++i)
    if (seen[i] == me) return std::to_string(i);
  seen.push_back(me);
  return std::to_string(seen.size() - 1);
}

const char* domain_name(nvtxDomainHandle_t d) {
  return d ? reinterpret_cast<const Domain*>(d)->name.c_str() : "-";
}

std::string message_of(const nvtxEventAttributes_t* a) {
  if (!a) return "?";
  switch (a->messageType) {
    case NVTX_MESSAGE_TYPE_ASCII: return a->message.ascii ? a->message.ascii : "";
    case NVTX_MESSAGE_TYPE_REGISTERED:
      return a->message.registered ? reinterpret_cast<const RegisteredString*>(a->message.registered)->text : "?";
    case NVTX_MESSAGE_TYPE_UNICODE: return "(unicode)";
    default: return "";
  }
}

std::string payload_of(const nvtxEventAttributes_t* a) {
  if (!a) return "-";
  char buf[64];
  switch (a->payloadType) {
    case NVTX_PAYLOAD_TYPE_INT64: std::snprintf(buf, sizeof buf, "%" PRId64, a->payload.llValue); return buf;
    case NVTX_PAYLOAD_TYPE_UNSIGNED_INT64:
      std::snprintf(buf, sizeof buf, "%" PRIu64, a->payload.ullValue);
      return buf;
    case NVTX_PAYLOAD_TYPE_INT32: return std::to_string(a->payload.iValue);
    case NVTX_PAYLOAD_TYPE_UNSIGNED_INT32: return std::to_string(a->payload.uiValue);
    case NVTX_PAYLOAD_TYPE_DOUBLE: std::snprintf(buf, sizeof buf, "%g", a->payload.dValue); return buf;
    case NVTX_PAYLOAD_TYPE_FLOAT: std::snprintf(buf, sizeof buf, "%g", double(a->payload.fValue)); return buf;
    default: return "-";
  }
}

void record(std::string line) {
  Recorder& r = recorder();
  const std::lock_guard<std::mutex> lock(r.mutex);
  r.lines.push_back(std::move(line));
}

void write_record() {
  const char* path = std::getenv("KDAGRAPH_NVTX_RECORD");
  if (!path) return;
  Recorder& r = recorder();
  const std::lock_guard<std::mutex> lock(r.mutex);
  if (FILE* f = std::fopen(path, "w")) {
    for (const std::string& line : r.lines) std::fprintf(f, "%s\n", line.c_str());
    std::fclose(f);
  }
}

// ---- CORE2: domain API ----
nvtxDomainHandle_t NVTX_API domain_create(const char* name) {
  Recorder& r = recorder();
  const std::lock_guard<std::mutex> lock(r.mutex);
  r.domains.push_back(Domain{name ? name : ""});
  return reinterpret_cast<nvtxDomainHandle_t>(&r.domains.back());
}

void NVTX_API domain_destroy(nvtxDomainHandle_t) {}

nvtxStringHandle_t NVTX_API domain_register_string(nvtxDomainHandle_t, const char* text) {
  Recorder& r = recorder();
  const std::lock_guard<std::mutex> lock(r.mutex);
  r.strings.push_back(RegisteredString{text ? text : ""});
  return reinterpret_cast<nvtxStringHandle_t>(&r.strings.back());
}

int NVTX_API domain_push(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  record("push\t" + thread_id() + "\t" + domain_name(d) + "\t" + message_of(a) + "\t" + payload_of(a));
  return 0;
}

int NVTX_API domain_pop(nvtxDomainHandle_t d) {
  record("pop\t" + thread_id() + "\t" + domain_name(d));
  return 0;
}

// ---- CORE: the default domain ----
int NVTX_API push_ex(const nvtxEventAttributes_t* a) { return domain_push(nullptr, a); }
int NVTX_API push_a(const char* message) {
  record("push\t" + thread_id() + "\t-\t" + (message ? message : "") + "\t-");
  return 0;
}
int NVTX_API pop() { return domain_pop(nullptr); }

template <class Fn>
bool install(NvtxFunctionTable table, unsigned int size, unsigned int id, Fn fn) {
  if (!table || id >= size || !table[id]) return false;
  *table[id] = reinterpret_cast<NvtxFunctionPointer>(fn);
  return true;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table) {
  const auto* callbacks = static_cast<const NvtxExportTableCallbacks*>(get_table(NVTX_ETID_CALLBACKS));
  if (!callbacks || !callbacks->GetModuleFunctionTable) return 0;
  NvtxFunctionTable core = nullptr, core2 = nullptr;
  unsigned int core_size = 0, core2_size = 0;
  if (!callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &core, &core_size)) return 0;
  if (!callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &core2, &core2_size)) return 0;
  bool ok = true;
  ok &= install(core, core_size, NVTX_CBID_CORE_RangePushEx, &push_ex);
  ok &= install(core, core_size, NVTX_CBID_CORE_RangePushA, &push_a);
  ok &= install(core, core_size, NVTX_CBID_CORE_RangePop, &pop);
  ok &= install(core2, core2_size, NVTX_CBID_CORE2_DomainCreateA, &domain_create);
  ok &= install(core2, core2_size, NVTX_CBID_CORE2_DomainDestroy, &domain_destroy);
  ok &= install(core2, core2_size, NVTX_CBID_CORE2_DomainRegisterStringA, &domain_register_string);
  ok &= install(core2, core2_size, NVTX_CBID_CORE2_DomainRangePushEx, &domain_push);
  ok &= install(core2, core2_size, NVTX_CBID_CORE2_DomainRangePop, &domain_pop);
  if (!ok) return 0;
  record("init\t" + thread_id());
  std::atexit(write_record);
  return 1;
}
