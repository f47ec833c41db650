#include "common/job_token.h"

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpcpp/support/client_interceptor.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace pstrain {
namespace {

constexpr char kCoordinatorRole[] = "coordinator";
constexpr char kMemberRole[] = "member";
constexpr char kHealthPrefix[] = "/grpc.health.v1.Health/";
constexpr char kShutdownMethod[] = "/pstrain.v1.ParameterServer/Shutdown";
constexpr char kCheckpointMethod[] = "/pstrain.v1.ParameterServer/Checkpoint";
constexpr char kRollbackMethod[] = "/pstrain.v1.ParameterServer/Rollback";

bool SameSecret(absl::string_view a, absl::string_view b) {
  // Constant time in the content, so timing does not reveal a prefix.
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ b[i];
  return diff == 0;
}

// --- client side -----------------------------------------------------------

class TokenInterceptor : public grpc::experimental::Interceptor {
 public:
  TokenInterceptor(const std::string* token, const char* role)
      : token_(token), role_(role) {}
  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::
                PRE_SEND_INITIAL_METADATA)) {
      auto* metadata = methods->GetSendInitialMetadata();
      metadata->emplace(kTokenMetadataKey, *token_);
      metadata->emplace(kRoleMetadataKey, role_);
    }
    methods->Proceed();
  }

 private:
  const std::string* token_;  // owned by the factory
  const char* role_;
};

class TokenInterceptorFactory
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  TokenInterceptorFactory(std::shared_ptr<const std::string> token,
                          const char* role)
      : token_(std::move(token)), role_(role) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* /*info*/) override {
    return new TokenInterceptor(token_.get(), role_);
  }

 private:
  std::shared_ptr<const std::string> token_;
  const char* role_;
};

// Channel credentials that create channels through `inner` with one more
// interceptor, the token's. (Call credentials would be simpler, but gRPC
// refuses to compose them with plaintext channel credentials.)
class TokenChannelCredentials : public grpc::ChannelCredentials {
 public:
  TokenChannelCredentials(std::shared_ptr<grpc::ChannelCredentials> inner,
                          std::string token, CallerRole role)
      : inner_(std::move(inner)),
        token_(std::make_shared<const std::string>(std::move(token))),
        role_(role == CallerRole::kCoordinator ? kCoordinatorRole
                                               : kMemberRole) {}

 protected:
  grpc::SecureChannelCredentials* AsSecureCredentials() override {
    return nullptr;
  }

 private:
  std::shared_ptr<grpc::Channel> CreateChannelImpl(
      const std::string& target, const grpc::ChannelArguments& args) override {
    return CreateChannelWithInterceptors(target, args, {});
  }

  std::shared_ptr<grpc::Channel> CreateChannelWithInterceptors(
      const std::string& target, const grpc::ChannelArguments& args,
      std::vector<std::unique_ptr<
          grpc::experimental::ClientInterceptorFactoryInterface>>
          interceptor_creators) override {
    interceptor_creators.push_back(
        std::make_unique<TokenInterceptorFactory>(token_, role_));
    return grpc::experimental::CreateCustomChannelWithInterceptors(
        target, inner_, args, std::move(interceptor_creators));
  }

  std::shared_ptr<grpc::ChannelCredentials> inner_;
  std::shared_ptr<const std::string> token_;
  const char* role_;
};

// --- server side -----------------------------------------------------------

absl::string_view View(const grpc_slice& slice) {
  return absl::string_view(
      reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(slice)),
      GRPC_SLICE_LENGTH(slice));
}

struct ProcessorState {
  std::string expected;
};

// gRPC core's auth metadata processor: runs in the server auth filter for
// every call, before the call reaches a service. Non-blocking, so it answers
// synchronously.
void ProcessMetadata(void* state, grpc_auth_context* /*context*/,
                     const grpc_metadata* md, size_t num_md,
                     grpc_process_auth_metadata_done_cb cb, void* user_data) {
  const auto* s = static_cast<const ProcessorState*>(state);
  absl::string_view path, token, role;
  for (size_t i = 0; i < num_md; ++i) {
    const absl::string_view key = View(md[i].key);
    if (key == ":path") path = View(md[i].value);
    if (key == kTokenMetadataKey) token = View(md[i].value);
    if (key == kRoleMetadataKey) role = View(md[i].value);
  }
  const absl::Status st = CheckJobToken(path, token, role, s->expected);
  if (st.ok()) {
    cb(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_OK, nullptr);
    return;
  }
  const std::string message(st.message());
  cb(user_data, nullptr, 0, nullptr, 0,
     static_cast<grpc_status_code>(st.code()), message.c_str());
}

void DestroyProcessor(void* state) {
  delete static_cast<ProcessorState*>(state);
}

// Builds gRPC core credentials (plaintext or TLS) with the token check for
// each listening port.
class TokenServerCredentials : public grpc::ServerCredentials {
 public:
  TokenServerCredentials(std::unique_ptr<grpc::SslServerCredentialsOptions> tls,
                         std::string expected)
      : tls_(std::move(tls)), expected_(std::move(expected)) {}

  void SetAuthMetadataProcessor(
      const std::shared_ptr<grpc::AuthMetadataProcessor>& /*processor*/)
      override {
    // The token check is this object's processor; replacing it would
    // silently open the server.
    std::fprintf(stderr,
                 "TokenServerCredentials: SetAuthMetadataProcessor is not "
                 "supported\n");
    std::abort();
  }

 private:
  int AddPortToServer(const std::string& addr, grpc_server* server) override {
    grpc_server_credentials* creds = nullptr;
    if (tls_ == nullptr) {
      creds = grpc_insecure_server_credentials_create();
    } else {
      std::vector<grpc_ssl_pem_key_cert_pair> pairs;
      for (const auto& p : tls_->pem_key_cert_pairs) {
        pairs.push_back({p.private_key.c_str(), p.cert_chain.c_str()});
      }
      creds = grpc_ssl_server_credentials_create_ex(
          tls_->pem_root_certs.empty() ? nullptr : tls_->pem_root_certs.c_str(),
          pairs.data(), pairs.size(), tls_->client_certificate_request,
          nullptr);
    }
    if (creds == nullptr) return 0;
    grpc_server_credentials_set_auth_metadata_processor(
        creds,
        {ProcessMetadata, DestroyProcessor, new ProcessorState{expected_}});
    const int port = grpc_server_add_http2_port(server, addr.c_str(), creds);
    grpc_server_credentials_release(creds);
    return port;
  }

  std::unique_ptr<grpc::SslServerCredentialsOptions> tls_;
  std::string expected_;
};

}  // namespace

absl::StatusOr<std::string> ReadJobToken(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot read token file '", path, "'"));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string token(absl::StripTrailingAsciiWhitespace(buffer.str()));
  if (token.size() < kMinTokenBytes || token.size() > kMaxTokenBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "token file '", path, "' must hold ", kMinTokenBytes, " to ",
        kMaxTokenBytes, " characters (it holds ", token.size(), ")"));
  }
  for (char c : token) {
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(
          absl::StrCat("token file '", path,
                       "' may hold only printable ASCII without spaces"));
    }
  }
  return token;
}

absl::Status CheckJobToken(absl::string_view method, absl::string_view token,
                           absl::string_view role, absl::string_view expected) {
  if (absl::StartsWith(method, kHealthPrefix)) return absl::OkStatus();
  if (token.empty()) {
    return absl::UnauthenticatedError(
        "this job requires its token (metadata x-pstrain-token; "
        "--token_file or network.token_file)");
  }
  if (!SameSecret(token, expected)) {
    return absl::UnauthenticatedError("wrong job token");
  }
  if (method == kShutdownMethod && role != kCoordinatorRole) {
    return absl::PermissionDeniedError(
        "only the coordinator may shut a shard down");
  }
  if (method == kCheckpointMethod && role != kCoordinatorRole) {
    return absl::PermissionDeniedError(
        "only the coordinator may order a checkpoint");
  }
  if (method == kRollbackMethod && role != kCoordinatorRole) {
    return absl::PermissionDeniedError(
        "only the coordinator may order a rollback");
  }
  return absl::OkStatus();
}

std::string FormatPushSession(const PushSession& s) {
  return absl::StrCat(s.worker, ".", s.session_id, ".", s.generation);
}

absl::StatusOr<PushSession> ParsePushSession(absl::string_view text) {
  const std::vector<absl::string_view> parts = absl::StrSplit(text, '.');
  PushSession s;
  if (text.size() > 64 || parts.size() != 3 ||
      !absl::SimpleAtoi(parts[0], &s.worker) ||
      !absl::SimpleAtoi(parts[1], &s.session_id) ||
      !absl::SimpleAtoi(parts[2], &s.generation)) {
    return absl::InvalidArgumentError(
        "malformed push session (metadata x-pstrain-push-session: "
        "WORKER.SESSION.GENERATION)");
  }
  return s;
}

void AddPushSession(grpc::ClientContext* context, uint32_t worker,
                    uint64_t session_id, uint64_t generation) {
  context->AddMetadata(kPushSessionMetadataKey,
                       FormatPushSession({worker, session_id, generation}));
}

std::string NewCoordinatorKey() {
  std::random_device source;  // /dev/urandom with libstdc++ on Linux
  std::string key;
  key.reserve(2 * kCoordinatorKeyBytes);
  static constexpr char kHex[] = "0123456789abcdef";
  for (int i = 0; i < kCoordinatorKeyBytes; ++i) {
    const unsigned byte = source() & 0xff;
    key.push_back(kHex[byte >> 4]);
    key.push_back(kHex[byte & 15]);
  }
  return key;
}

void AddCoordinatorKey(grpc::ClientContext* context, const std::string& key) {
  if (!key.empty()) context->AddMetadata(kCoordinatorKeyMetadataKey, key);
}

absl::Status CheckCoordinatorKey(const grpc::ServerContext& context,
                                 absl::string_view expected,
                                 absl::string_view what) {
  const auto& md = context.client_metadata();
  auto it = md.find(kCoordinatorKeyMetadataKey);
  const absl::string_view got =
      it == md.end() ? absl::string_view()
                     : absl::string_view(it->second.data(), it->second.size());
  if (!expected.empty() && SameSecret(got, expected)) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "only the coordinator may ", what,
      expected.empty() ? " (this shard has not registered with one yet)"
      : got.empty()    ? " (the call carries no coordinator key)"
                       : " (wrong coordinator key)",
      "; nothing changed"));
}

std::shared_ptr<grpc::ChannelCredentials> WithJobToken(
    std::shared_ptr<grpc::ChannelCredentials> inner, std::string token,
    CallerRole role) {
  return std::make_shared<TokenChannelCredentials>(std::move(inner),
                                                   std::move(token), role);
}

std::shared_ptr<grpc::ServerCredentials> TokenCheckingServerCredentials(
    std::unique_ptr<grpc::SslServerCredentialsOptions> tls,
    std::string expected_token) {
  return std::make_shared<TokenServerCredentials>(std::move(tls),
                                                  std::move(expected_token));
}

}  // namespace pstrain
