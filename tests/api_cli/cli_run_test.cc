// The deskbox binary against a fake daemon on 127.0.0.1:0: what it sends, what it prints, how
// it exits, and that files and event streams are streamed.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "common/base64.h"

namespace deskbox::cli {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using nlohmann::json;
using nlohmann::ordered_json;

constexpr const char* kKey = "dbk_SECRET0123456789";

struct Recorded {
  std::string method, target, host, authorization, content_type, content_length, transfer_encoding,
      body;
};

// Serves one request per connection, in order, on its own thread. The handler writes the
// response itself so tests can send partial or slow bodies.
class FakeDaemon {
 public:
  using Handler = std::function<void(const Recorded&, tcp::socket&)>;

  explicit FakeDaemon(Handler handler) : handler_(std::move(handler)) {
    acceptor_.open(tcp::v4());
    acceptor_.set_option(asio::socket_base::reuse_address(true));
    acceptor_.bind({asio::ip::make_address("127.0.0.1"), 0});
    acceptor_.listen();
    port_ = acceptor_.local_endpoint().port();
    thread_ = std::thread([this] { Loop(); });
  }
  ~FakeDaemon() {
    stopping_ = true;
    tcp::socket wake(ioc_);  // unblocks accept()
    beast::error_code ec;
    wake.connect({asio::ip::make_address("127.0.0.1"), port_}, ec);
    thread_.join();
  }

  std::string Url(std::string_view prefix = "") const {
    return "http://127.0.0.1:" + std::to_string(port_) + std::string(prefix);
  }
  uint16_t port() const { return port_; }
  std::vector<Recorded> requests() {
    std::lock_guard lock(mu_);
    return requests_;
  }

 private:
  void Loop() {
    for (;;) {
      tcp::socket socket(ioc_);
      beast::error_code ec;
      acceptor_.accept(socket, ec);
      if (stopping_) return;
      if (ec) continue;
      beast::flat_buffer buffer;
      http::request_parser<http::string_body> parser;
      parser.body_limit(1ull << 31);
      http::read(socket, buffer, parser, ec);
      if (ec) continue;
      const auto& req = parser.get();
      Recorded r{std::string(req.method_string()),
                 std::string(req.target()),
                 std::string(req[http::field::host]),
                 std::string(req[http::field::authorization]),
                 std::string(req[http::field::content_type]),
                 std::string(req[http::field::content_length]),
                 std::string(req[http::field::transfer_encoding]),
                 req.body()};
      {
        std::lock_guard lock(mu_);
        requests_.push_back(r);
      }
      handler_(r, socket);
      socket.shutdown(tcp::socket::shutdown_both, ec);
    }
  }

  Handler handler_;
  asio::io_context ioc_;
  tcp::acceptor acceptor_{ioc_};
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::vector<Recorded> requests_;
  std::thread thread_;
};

void Send(tcp::socket& socket, unsigned status, std::string body,
          std::string_view content_type = "application/json",
          std::map<std::string, std::string> headers = {}) {
  http::response<http::string_body> res{static_cast<http::status>(status), 11};
  res.set(http::field::content_type, content_type);
  for (const auto& [k, v] : headers) res.set(k, v);
  res.body() = std::move(body);
  res.prepare_payload();
  beast::error_code ec;
  http::write(socket, res, ec);
}

void SendError(tcp::socket& socket, unsigned status, std::string_view code,
               std::string_view message) {
  Send(socket, status, json{{"error", {{"code", code}, {"message", message}}}}.dump());
}

void WriteRaw(tcp::socket& socket, std::string_view bytes) {
  beast::error_code ec;
  asio::write(socket, asio::buffer(bytes.data(), bytes.size()), ec);
}

void SendChunkedHeader(tcp::socket& socket, std::string_view content_type) {
  WriteRaw(socket, "HTTP/1.1 200 OK\r\nContent-Type: " + std::string(content_type) +
                       "\r\nTransfer-Encoding: chunked\r\n\r\n");
}
void SendChunk(tcp::socket& socket, std::string_view data) {
  std::ostringstream size;
  size << std::hex << data.size();
  WriteRaw(socket, size.str() + "\r\n" + std::string(data) + "\r\n");
}
void SendLastChunk(tcp::socket& socket) {
  WriteRaw(socket, "0\r\n\r\n");
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "deskbox-cli-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string File(std::string_view name) const { return path_ + "/" + std::string(name); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void WriteAll(const std::string& path, std::string_view data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

std::string Pattern(size_t size) {
  std::string s(size, '\0');
  uint32_t x = 12345;
  for (auto& c : s) {
    x = x * 1103515245 + 12345;
    c = static_cast<char>(x >> 16);
  }
  return s;
}

struct CliResult {
  int exit_code = -1;
  std::string out, err;
};

// Runs the deskbox binary with only the given environment (so the developer's DESKBOX_*
// variables do not leak in), `stdin_data` as stdin, and in `cwd` when given.
class Cli {
 public:
  Cli() : stdout_path_(dir_.File("stdout")), stderr_path_(dir_.File("stderr")) {}

  CliResult Run(std::vector<std::string> args, std::map<std::string, std::string> env = {},
                const std::string& stdin_data = {}, const std::string& cwd = {}) {
    std::string stdin_path = dir_.File("stdin");
    WriteAll(stdin_path, stdin_data);
    std::vector<std::string> argv_s = {DESKBOX_CLI_BIN};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_s = {"PATH=/usr/bin:/bin"};
    for (const auto& [k, v] : env) env_s.push_back(k + "=" + v);
    std::vector<char*> envp;
    for (auto& e : env_s) envp.push_back(e.data());
    envp.push_back(nullptr);

    pid_t pid = ::fork();
    if (pid == 0) {
      int in = ::open(stdin_path.c_str(), O_RDONLY);
      int out = ::open(stdout_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      int err = ::open(stderr_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      ::dup2(in, 0);
      ::dup2(out, 1);
      ::dup2(err, 2);
      if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) ::_exit(126);
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    CliResult r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = ReadAll(stdout_path_);
    r.err = ReadAll(stderr_path_);
    return r;
  }

  const std::string& stdout_path() const { return stdout_path_; }
  const TempDir& dir() const { return dir_; }

 private:
  TempDir dir_;
  std::string stdout_path_, stderr_path_;
};

std::map<std::string, std::string> EnvFor(const FakeDaemon& d, std::string_view prefix = "") {
  return {{"DESKBOX_URL", d.Url(prefix)}, {"DESKBOX_KEY", kKey}};
}

ordered_json MakeSandbox(std::string_view id, std::string_view state) {
  ordered_json s = ordered_json::parse(R"({"id":"","state":"","template":"desktop@0123456789abcdef",
    "resolution":{"width":1280,"height":800},"timeout_s":3600,"on_timeout":"pause",
    "expires_at":null,"created_at":"2026-01-01T00:00:00.000Z"})");
  s["id"] = id;
  s["state"] = state;
  return s;
}

TEST(CliRun, HelpAndUsageExitCodes) {
  Cli cli;
  auto help = cli.Run({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_TRUE(help.out.starts_with("usage: deskbox")) << help.out;
  auto cmd_help = cli.Run({"cp", "--help"});
  EXPECT_EQ(cmd_help.exit_code, 0);
  EXPECT_TRUE(cmd_help.out.starts_with("usage: deskbox cp")) << cmd_help.out;
  auto bad = cli.Run({"ls", "--bogus"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_TRUE(bad.out.empty());
  EXPECT_NE(bad.err.find("deskbox: unknown option --bogus"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("usage: deskbox ls"), std::string::npos) << bad.err;
  auto https = cli.Run({"--url", "https://h", "ls"});
  EXPECT_EQ(https.exit_code, 2);
  EXPECT_NE(https.err.find("https is not supported"), std::string::npos) << https.err;
}

TEST(CliRun, ListPrintsTableAndSendsCredential) {
  FakeDaemon daemon([](const Recorded&, tcp::socket& s) {
    ordered_json body = {{"sandboxes", {MakeSandbox("sb-1", "running")}}};
    Send(s, 200, body.dump());
  });
  Cli cli;
  auto r = cli.Run({"ls", "--state", "running"}, EnvFor(daemon, "/pre/"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "ID    STATE    TEMPLATE                  RESOLUTION  EXPIRES  CREATED\n"
            "sb-1  running  desktop@0123456789abcdef  1280x800    -        "
            "2026-01-01T00:00:00.000Z\n");
  auto reqs = daemon.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].method, "GET");
  EXPECT_EQ(reqs[0].target, "/pre/v1/sandboxes?state=running");
  EXPECT_EQ(reqs[0].authorization, std::string("Bearer ") + kKey);
  EXPECT_EQ(reqs[0].host, "127.0.0.1:" + std::to_string(daemon.port()));
}

TEST(CliRun, KeyFileAndTokenFlag) {
  FakeDaemon daemon(
      [](const Recorded&, tcp::socket& s) { Send(s, 200, MakeSandbox("sb-1", "running").dump()); });
  Cli cli;
  std::string key_file = cli.dir().File("key");
  WriteAll(key_file, "dbk_fromfile\n");
  EXPECT_EQ(cli.Run({"--url", daemon.Url(), "--key-file", key_file, "show", "sb-1"}).exit_code, 0);
  EXPECT_EQ(cli.Run({"--url", daemon.Url(), "--token", "dbt_tok", "show", "sb-1"}).exit_code, 0);
  auto reqs = daemon.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].authorization, "Bearer dbk_fromfile");
  EXPECT_EQ(reqs[1].authorization, "Bearer dbt_tok");
}

TEST(CliRun, CreatePrintsIdOrTheJson) {
  FakeDaemon daemon([](const Recorded&, tcp::socket& s) {
    Send(s, 201, MakeSandbox("sb-new", "running").dump());
  });
  Cli cli;
  auto r = cli.Run({"create", "--resolution", "1024x768", "--meta", "a=b"}, EnvFor(daemon));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "sb-new\n");
  auto j = cli.Run({"--json", "create"}, EnvFor(daemon));
  EXPECT_EQ(j.exit_code, 0) << j.err;
  EXPECT_EQ(j.out, MakeSandbox("sb-new", "running").dump(2) + "\n");  // daemon's key order
  auto reqs = daemon.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].method, "POST");
  EXPECT_EQ(reqs[0].content_type, "application/json");
  EXPECT_EQ(json::parse(reqs[0].body),
            json::parse(R"({"resolution":{"width":1024,"height":768},"metadata":{"a":"b"}})"));
}

TEST(CliRun, ApiErrorOnStderrWithoutTheKey) {
  FakeDaemon daemon(
      [](const Recorded&, tcp::socket& s) { SendError(s, 404, "not_found", "no sandbox sb-x"); });
  Cli cli;
  auto r = cli.Run({"show", "sb-x"}, EnvFor(daemon));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "deskbox: not_found: no sandbox sb-x\n");
}

TEST(CliRun, UnauthorizedSaysWhereTheKeyCameFrom) {
  FakeDaemon daemon(
      [](const Recorded&, tcp::socket& s) { SendError(s, 401, "unauthorized", "unknown key"); });
  Cli cli;
  auto none = cli.Run({"--url", daemon.Url(), "ls"});
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.err.find("no API key"), std::string::npos) << none.err;
  auto with = cli.Run({"ls"}, EnvFor(daemon));
  EXPECT_NE(with.err.find("(credential from DESKBOX_KEY)"), std::string::npos) << with.err;
  EXPECT_EQ(with.err.find("SECRET"), std::string::npos) << with.err;
}

TEST(CliRun, NonJsonErrorShowsStatus) {
  FakeDaemon daemon([](const Recorded&, tcp::socket& s) {
    Send(s, 502, "<html>bad gateway</html>", "text/html");
  });
  Cli cli;
  auto r = cli.Run({"ls"}, EnvFor(daemon));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "deskbox: HTTP 502 Bad Gateway: <html>bad gateway</html>\n");
}

TEST(CliRun, RateLimitShowsRetryAfter) {
  FakeDaemon daemon([](const Recorded&, tcp::socket& s) {
    Send(s, 429, R"({"error":{"code":"rate_limited","message":"too many creates"}})",
         "application/json", {{"Retry-After", "2"}});
  });
  Cli cli;
  auto r = cli.Run({"create"}, EnvFor(daemon));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "deskbox: rate_limited: too many creates (retry after 2 s)\n");
}

TEST(CliRun, ConnectionRefusedNamesTheUrl) {
  uint16_t port;
  {
    asio::io_context ioc;
    tcp::acceptor a(ioc, {asio::ip::make_address("127.0.0.1"), 0});
    port = a.local_endpoint().port();
  }
  Cli cli;
  std::string url = "http://127.0.0.1:" + std::to_string(port);
  auto r = cli.Run({"ls"}, {{"DESKBOX_URL", url}, {"DESKBOX_KEY", kKey}});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "deskbox: cannot connect to " + url + ": Connection refused\n");
}

TEST(CliRun, RemoveGoesOnAfterAFailure) {
  FakeDaemon daemon([](const Recorded& r, tcp::socket& s) {
    if (r.target.ends_with("sb-a"))
      SendError(s, 404, "not_found", "no sandbox sb-a");
    else
      Send(s, 204, "");
  });
  Cli cli;
  auto r = cli.Run({"rm", "sb-a", "sb-b"}, EnvFor(daemon));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "deskbox: sb-a: not_found: no sandbox sb-a\n");
  auto reqs = daemon.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[1].method, "DELETE");
  EXPECT_EQ(reqs[1].target, "/v1/sandboxes/sb-b");
}

TEST(CliRun, ExecWritesBinaryOutputExactlyAndMirrorsTheExitCode) {
  std::string all_bytes;
  for (int i = 0; i < 256; ++i) all_bytes.push_back(static_cast<char>(i));
  FakeDaemon daemon([&](const Recorded&, tcp::socket& s) {
    json out = {{"exit_code", 3},
                {"signal", 0},
                {"stdout", Base64Encode(all_bytes)},
                {"stderr", Base64Encode("warn\n")},
                {"encoding", "base64"},
                {"truncated", false},
                {"timed_out", false},
                {"duration_ms", 5}};
    Send(s, 200, out.dump());
  });
  Cli cli;
  auto r = cli.Run({"exec", "sb-1", "--stdin", "--", "cat", "-v"}, EnvFor(daemon), "in\0put");
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.out, all_bytes);
  EXPECT_EQ(r.err, "warn\n");
  auto reqs = daemon.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].target, "/v1/sandboxes/sb-1/exec");
  json body = json::parse(reqs[0].body);
  EXPECT_EQ(body["argv"], json({"cat", "-v"}));
  EXPECT_EQ(body["encoding"], "base64");
  EXPECT_EQ(body["stdin_b64"], Base64Encode("in"));  // the literal stops at the NUL
}

TEST(CliRun, ExecSignalTimeoutAndTruncation) {
  std::mutex mu;
  json answer;
  auto set_answer = [&](json j) {
    std::lock_guard lock(mu);
    answer = std::move(j);
  };
  FakeDaemon daemon([&](const Recorded&, tcp::socket& s) {
    std::lock_guard lock(mu);
    Send(s, 200, answer.dump());
  });
  Cli cli;
  set_answer({{"exit_code", -1},
              {"signal", 9},
              {"stdout", ""},
              {"stderr", ""},
              {"encoding", "base64"},
              {"truncated", true},
              {"timed_out", false}});
  auto killed = cli.Run({"exec", "sb-1", "--shell", "kill -9 $$"}, EnvFor(daemon));
  EXPECT_EQ(killed.exit_code, 137);
  EXPECT_NE(killed.err.find("truncated"), std::string::npos) << killed.err;
  set_answer({{"exit_code", -1},
              {"signal", 9},
              {"stdout", ""},
              {"stderr", ""},
              {"encoding", "base64"},
              {"truncated", false},
              {"timed_out", true}});
  auto timed_out = cli.Run({"exec", "sb-1", "--timeout", "2", "sleep", "9"}, EnvFor(daemon));
  EXPECT_EQ(timed_out.exit_code, 124);
  EXPECT_NE(timed_out.err.find("timed out after 2 s"), std::string::npos) << timed_out.err;
  auto as_json = cli.Run({"--json", "exec", "sb-1", "true"}, EnvFor(daemon));
  EXPECT_EQ(as_json.exit_code, 124);
  std::lock_guard lock(mu);
  EXPECT_EQ(json::parse(as_json.out), answer);
}

TEST(CliRun, UploadStreamsAFileWithContentLength) {
  FakeDaemon daemon([](const Recorded& r, tcp::socket& s) {
    Send(s, 200, json{{"path", "/tmp/x"}, {"bytes", r.body.size()}}.dump());
  });
  Cli cli;
  std::string data = Pattern(3 * 1024 * 1024 + 7);
  std::string local = cli.dir().File("data.bin");
  WriteAll(local, data);
  auto r = cli.Run({"cp", "--mode", "0600", local, "sb-1:/tmp/dir/"}, EnvFor(daemon));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  auto reqs = daemon.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].method, "PUT");
  EXPECT_EQ(reqs[0].target, "/v1/sandboxes/sb-1/files?path=/tmp/dir/data.bin&mode=0600");
  EXPECT_EQ(reqs[0].content_length, std::to_string(data.size()));
  EXPECT_EQ(reqs[0].content_type, "application/octet-stream");
  EXPECT_TRUE(reqs[0].body == data);
}

TEST(CliRun, UploadFromStdinIsChunked) {
  FakeDaemon daemon([](const Recorded& r, tcp::socket& s) {
    Send(s, 200, json{{"path", "/tmp/x"}, {"bytes", r.body.size()}}.dump());
  });
  Cli cli;
  std::string data = Pattern(200 * 1024);
  auto r = cli.Run({"--json", "cp", "-", "sb-1:/tmp/x"}, EnvFor(daemon), data);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["bytes"], data.size());
  auto reqs = daemon.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].transfer_encoding, "chunked");
  EXPECT_TRUE(reqs[0].body == data);
}

TEST(CliRun, UploadRefusedEarlyReportsTheDaemonsAnswer) {
  FakeDaemon daemon(
      [](const Recorded&, tcp::socket& s) { SendError(s, 404, "not_found", "no sandbox sb-9"); });
  Cli cli;
  std::string local = cli.dir().File("small");
  WriteAll(local, "abc");
  auto r = cli.Run({"cp", local, "sb-9:/x"}, EnvFor(daemon));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "deskbox: not_found: no sandbox sb-9\n");
  auto missing = cli.Run({"cp", cli.dir().File("nope"), "sb-9:/x"}, EnvFor(daemon));
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("No such file"), std::string::npos) << missing.err;
}

TEST(CliRun, DownloadStreamsIntoTheFile) {
  std::string data = Pattern(5 * 1024 * 1024 + 3);
  FakeDaemon daemon([&](const Recorded&, tcp::socket& s) {
    SendChunkedHeader(s, "application/octet-stream");
    for (size_t off = 0; off < data.size(); off += 100000)
      SendChunk(s, std::string_view(data).substr(off, 100000));
    SendLastChunk(s);
  });
  Cli cli;
  std::string local = cli.dir().File("out.bin");
  auto r = cli.Run({"cp", "sb-1:/var/log/big file", local}, EnvFor(daemon));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(ReadAll(local) == data);
  EXPECT_EQ(daemon.requests()[0].target, "/v1/sandboxes/sb-1/files?path=/var/log/big%20file");

  // Into a directory: the remote file's name. To stdout with '-'.
  auto into_dir = cli.Run({"cp", "sb-1:/var/log/syslog", cli.dir().path()}, EnvFor(daemon));
  EXPECT_EQ(into_dir.exit_code, 0) << into_dir.err;
  EXPECT_TRUE(ReadAll(cli.dir().File("syslog")) == data);
  auto to_stdout = cli.Run({"cp", "sb-1:/x", "-"}, EnvFor(daemon));
  EXPECT_EQ(to_stdout.exit_code, 0) << to_stdout.err;
  EXPECT_TRUE(to_stdout.out == data);
  for (const auto& entry : std::filesystem::directory_iterator(cli.dir().path()))
    EXPECT_EQ(entry.path().filename().string().find(".deskbox-"), std::string::npos)
        << entry.path();
}

TEST(CliRun, FailedDownloadLeavesTheOldFileAlone) {
  std::atomic<bool> truncate = false;
  FakeDaemon daemon([&](const Recorded&, tcp::socket& s) {
    if (truncate) {
      WriteRaw(s, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + std::string(500, 'x'));
    } else {
      SendError(s, 404, "file_not_found", "no /nope in the guest");
    }
  });
  Cli cli;
  std::string local = cli.dir().File("keep");
  WriteAll(local, "old");
  auto missing = cli.Run({"cp", "sb-1:/nope", local}, EnvFor(daemon));
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_EQ(missing.err, "deskbox: file_not_found: no /nope in the guest\n");
  EXPECT_EQ(ReadAll(local), "old");
  truncate = true;
  auto cut = cli.Run({"cp", "sb-1:/half", local}, EnvFor(daemon));
  EXPECT_EQ(cut.exit_code, 1);
  EXPECT_NE(cut.err.find("closed the connection"), std::string::npos) << cut.err;
  EXPECT_EQ(ReadAll(local), "old");
  size_t files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(cli.dir().path()))
    ++files;
  EXPECT_EQ(files, 4u);  // keep, stdin, stdout, stderr: no temporary left over
}

TEST(CliRun, ScreenshotWritesTheBody) {
  std::string png = "\x89PNG\r\n\x1a\n" + Pattern(70000);
  FakeDaemon daemon([&](const Recorded&, tcp::socket& s) { Send(s, 200, png, "image/png"); });
  Cli cli;
  std::string local = cli.dir().File("shot.png");
  auto r = cli.Run({"screenshot", "sb-1", "-o", local}, EnvFor(daemon));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(ReadAll(local) == png);
  EXPECT_EQ(daemon.requests()[0].target, "/v1/sandboxes/sb-1/screenshot?format=png");
  EXPECT_EQ(std::filesystem::status(local).permissions() & std::filesystem::perms::owner_read,
            std::filesystem::perms::owner_read);
}

TEST(CliRun, FollowPrintsEachEventAsItArrives) {
  Cli cli;
  std::string stdout_path = cli.stdout_path();
  std::atomic<bool> saw_first_line_early = false;
  FakeDaemon daemon([&](const Recorded&, tcp::socket& s) {
    SendChunkedHeader(s, "application/x-ndjson");
    SendChunk(s, "{\"seq\":1}\n{\"se");
    // The CLI must print the first event before the stream ends.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      if (ReadAll(stdout_path) == "{\"seq\":1}\n") {
        saw_first_line_early = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    SendChunk(s, "q\":2}\r\n\n");
    SendChunk(s, "{\"seq\":3}");
    SendLastChunk(s);
  });
  auto r = cli.Run({"events", "sb-1", "--follow", "--since", "0"}, EnvFor(daemon));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(saw_first_line_early);
  EXPECT_EQ(r.out, "{\"seq\":1}\n{\"seq\":2}\n{\"seq\":3}\n");
  EXPECT_EQ(daemon.requests()[0].target, "/v1/sandboxes/sb-1/events?since=0&follow=1");
}

TEST(CliRun, FollowReconnectsAfterTheEventItLastPrinted) {
  std::atomic<int> connections = 0;
  FakeDaemon daemon([&](const Recorded&, tcp::socket& s) {
    SendChunkedHeader(s, "application/x-ndjson");
    if (connections++ == 0) {
      SendChunk(s, "{\"seq\":4}\n{\"seq\":5,\"cut");  // then the connection drops
    } else {
      SendChunk(s, "{\"seq\":5}\n");
      SendLastChunk(s);
    }
  });
  Cli cli;
  auto r = cli.Run({"events", "sb-1", "--follow", "--since", "3"}, EnvFor(daemon));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "{\"seq\":4}\n{\"seq\":5}\n");
  EXPECT_NE(r.err.find("following again after event 4"), std::string::npos) << r.err;
  auto reqs = daemon.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[1].target, "/v1/sandboxes/sb-1/events?since=4&follow=1");
}

TEST(CliRun, FollowWithoutProgressGivesUp) {
  FakeDaemon daemon([&](const Recorded&, tcp::socket& s) {
    SendChunkedHeader(s, "application/x-ndjson");
    SendChunk(s, "{\"seq\":");
  });
  Cli cli;
  auto r = cli.Run({"events", "sb-1", "--follow"}, EnvFor(daemon));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("closed the connection"), std::string::npos) << r.err;
  EXPECT_EQ(daemon.requests().size(), 1u);
}

TEST(CliRun, EventsPageThroughTheLog) {
  FakeDaemon daemon([](const Recorded& r, tcp::socket& s) {
    bool first = r.target.find("since=5&") != std::string::npos;
    ordered_json events = ordered_json::array();
    uint64_t from = first ? 6 : 1006, count = first ? 1000 : 2;
    for (uint64_t seq = from; seq < from + count; ++seq)
      events.push_back({{"seq", seq}, {"kind", "action"}});
    Send(s, 200, ordered_json{{"events", events}, {"next_since", from + count - 1}}.dump());
  });
  Cli cli;
  auto r = cli.Run({"events", "sb-1", "--since", "5"}, EnvFor(daemon));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1002);
  EXPECT_TRUE(r.out.starts_with("{\"seq\":6,\"kind\":\"action\"}\n")) << r.out.substr(0, 80);
  auto reqs = daemon.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[1].target, "/v1/sandboxes/sb-1/events?since=1005&limit=1000");
}

TEST(CliRun, EgressReadsAndReplacesThePolicy) {
  constexpr std::string_view kPolicy = R"({"default":"deny",)"
                                       R"("allow":["example.com","*.example.com:443"],)"
                                       R"("deny":["ads.example.com"]})";
  FakeDaemon daemon([&](const Recorded& r, tcp::socket& s) {
    if (r.method == "PUT" && r.body.find("bad rule") != std::string::npos)
      SendError(s, 400, "invalid_request", "allow[0]: \"bad rule\" is not a rule");
    else
      Send(s, 200, std::string(kPolicy));
  });
  Cli cli;
  const std::string text =
      "default deny\n"
      "allow example.com\n"
      "allow *.example.com:443\n"
      "deny ads.example.com\n";
  auto show = cli.Run({"egress", "sb-1"}, EnvFor(daemon));
  EXPECT_EQ(show.exit_code, 0) << show.err;
  EXPECT_EQ(show.out, text);
  auto set = cli.Run({"egress", "sb-1", "set", "--allow", "example.com", "--allow",
                      "*.example.com:443", "--deny", "ads.example.com"},
                     EnvFor(daemon));
  EXPECT_EQ(set.exit_code, 0) << set.err;
  EXPECT_EQ(set.out, text);
  auto as_json = cli.Run({"--json", "egress", "sb-1", "set"}, EnvFor(daemon));
  EXPECT_EQ(as_json.exit_code, 0) << as_json.err;
  EXPECT_EQ(as_json.out, ordered_json::parse(kPolicy).dump(2) + "\n");  // daemon's key order
  auto refused = cli.Run({"egress", "sb-1", "set", "--allow", "bad rule"}, EnvFor(daemon));
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_EQ(refused.out, "");
  EXPECT_EQ(refused.err, "deskbox: invalid_request: allow[0]: \"bad rule\" is not a rule\n");

  auto reqs = daemon.requests();
  ASSERT_EQ(reqs.size(), 4u);
  EXPECT_EQ(reqs[0].method, "GET");
  EXPECT_EQ(reqs[0].target, "/v1/sandboxes/sb-1/egress");
  EXPECT_EQ(reqs[0].body, "");
  EXPECT_EQ(reqs[1].method, "PUT");
  EXPECT_EQ(reqs[1].target, "/v1/sandboxes/sb-1/egress");
  EXPECT_EQ(reqs[1].content_type, "application/json");
  EXPECT_EQ(json::parse(reqs[1].body), json::parse(R"({"allow":["example.com",)"
                                                   R"("*.example.com:443"],)"
                                                   R"("deny":["ads.example.com"]})"));
  EXPECT_EQ(reqs[2].method, "PUT");
  EXPECT_EQ(reqs[2].body, "{}");

  auto usage = cli.Run({"egress"}, EnvFor(daemon));
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_NE(usage.err.find("deskbox: egress: missing ID"), std::string::npos) << usage.err;
  EXPECT_NE(usage.err.find("usage: deskbox egress"), std::string::npos) << usage.err;
  auto help = cli.Run({"egress", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_TRUE(help.out.starts_with("usage: deskbox egress ID")) << help.out;
  EXPECT_EQ(daemon.requests().size(), 4u);
}

TEST(CliRun, CreateSendsTheEgressPolicy) {
  FakeDaemon daemon([](const Recorded&, tcp::socket& s) {
    Send(s, 201, MakeSandbox("sb-new", "running").dump());
  });
  Cli cli;
  auto r = cli.Run(
      {"create", "--egress-default", "deny", "--allow", "b.example", "--allow", "a.example"},
      EnvFor(daemon));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "sb-new\n");
  auto bad = cli.Run({"create", "--egress-default", "open"}, EnvFor(daemon));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--egress-default: \"open\" is not one of deny, allow"), std::string::npos)
      << bad.err;
  auto reqs = daemon.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(json::parse(reqs[0].body),
            json::parse(R"({"egress":{"default":"deny","allow":["b.example","a.example"]}})"));
}

TEST(CliRun, TokensAndKeysPrintTheSecretOnce) {
  FakeDaemon daemon([](const Recorded& r, tcp::socket& s) {
    if (r.target == "/v1/keys" && r.method == "POST")
      Send(s, 201, R"({"id":"key_1","name":"ci","key":"dbk_new","created_at":"c"})");
    else if (r.target.ends_with("/tokens"))
      Send(s, 201, R"({"id":"tok_1","token":"dbt_new","scope":"view","sandbox_id":"sb-1",
                       "created_at":"c","expires_at":"e"})");
    else
      Send(s, 204, "");
  });
  Cli cli;
  auto token = cli.Run({"token", "sb-1", "--scope", "view", "--ttl", "60"}, EnvFor(daemon));
  EXPECT_EQ(token.exit_code, 0) << token.err;
  EXPECT_EQ(token.out, "dbt_new\n");
  auto key = cli.Run({"keys", "create", "ci"}, EnvFor(daemon));
  EXPECT_EQ(key.out, "dbk_new\n");
  auto rm = cli.Run({"keys", "rm", "key_1"}, EnvFor(daemon));
  EXPECT_EQ(rm.exit_code, 0);
  EXPECT_EQ(rm.out, "");
  auto reqs = daemon.requests();
  ASSERT_EQ(reqs.size(), 3u);
  EXPECT_EQ(json::parse(reqs[0].body), json::parse(R"({"scope":"view","ttl_s":60})"));
  EXPECT_EQ(reqs[2].method, "DELETE");
  EXPECT_EQ(reqs[2].target, "/v1/keys/key_1");
}

// ---- Recordings and replay ----

// Two segments, the second still being written, as docs/recording.md shows them.
ordered_json MakeRecording() {
  return ordered_json::parse(R"({"sandbox_id":"sb-1","enabled":true,"status":"recording",
    "problem":"","bytes":1234567,"duration_ms":61000,"dropped_frames":0,
    "url":"/v1/sandboxes/sb-1/recording.mp4","segments":[
      {"index":0,"file":"000000.mp4","start":"2026-12-04T12:00:00.000Z",
       "start_ms":1796392800000,"end":"2026-12-04T12:01:00.000Z","end_ms":1796392860000,
       "video_offset_ms":0,"bytes":1111111,
       "sha256":"fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210",
       "width":1280,"height":800,"truncated":false,"live":false,
       "url":"/v1/sandboxes/sb-1/recording/segments/000000.mp4"},
      {"index":1,"file":"000001.mp4","start":"2026-12-04T12:01:00.000Z",
       "start_ms":1796392860000,"end":"2026-12-04T12:01:01.000Z","end_ms":1796392861000,
       "video_offset_ms":60000,"bytes":123456,"sha256":"","width":1280,"height":800,
       "truncated":false,"live":true,
       "url":"/v1/sandboxes/sb-1/recording/segments/000001.mp4"}]})");
}

TEST(CliRun, RecordingLsPrintsTheSegments) {
  FakeDaemon daemon([](const Recorded&, tcp::socket& s) { Send(s, 200, MakeRecording().dump()); });
  Cli cli;
  auto r = cli.Run({"recording", "ls", "sb-1"}, EnvFor(daemon, "/pre"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "status: recording  enabled: true  size: 1.2 MiB  duration: 1m01s  dropped_frames: 0\n"
            "INDEX  START                     END                       DURATION  SIZE       "
            "SCREEN    SHA256            FLAGS\n"
            "0      2026-12-04T12:00:00.000Z  2026-12-04T12:01:00.000Z  1m00s     1.1 MiB    "
            "1280x800  fedcba9876543210\n"
            "1      2026-12-04T12:01:00.000Z  2026-12-04T12:01:01.000Z  1.0s      120.6 KiB  "
            "1280x800  -                 live\n");
  auto j = cli.Run({"recording", "ls", "sb-1", "--json"}, EnvFor(daemon));
  EXPECT_EQ(j.exit_code, 0) << j.err;
  EXPECT_EQ(j.out, MakeRecording().dump(2) + "\n");  // daemon's key order
  auto reqs = daemon.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].method, "GET");
  EXPECT_EQ(reqs[0].target, "/pre/v1/sandboxes/sb-1/recording");
  EXPECT_EQ(reqs[0].authorization, std::string("Bearer ") + kKey);
  EXPECT_EQ(reqs[1].target, "/v1/sandboxes/sb-1/recording");
}

TEST(CliRun, RecordingGetWritesExactlyTheServedBytes) {
  // A few hundred KiB: several 64 KiB pieces, with Content-Length for the whole recording and
  // chunked for a segment.
  std::string whole = Pattern(300 * 1024 + 17);
  std::string segment = Pattern(200 * 1024 + 5).substr(3);
  FakeDaemon daemon([&](const Recorded& r, tcp::socket& s) {
    if (r.target.ends_with("/recording.mp4")) {
      Send(s, 200, whole, "video/mp4");
      return;
    }
    SendChunkedHeader(s, "video/mp4");
    for (size_t off = 0; off < segment.size(); off += 50000)
      SendChunk(s, std::string_view(segment).substr(off, 50000));
    SendLastChunk(s);
  });
  Cli cli;
  auto r = cli.Run({"recording", "get", "sb-1"}, EnvFor(daemon), {}, cli.dir().path());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_TRUE(ReadAll(cli.dir().File("sb-1.mp4")) == whole);  // ID.mp4 in the current directory

  auto seg =
      cli.Run({"recording", "get", "sb-1", "--segment", "1"}, EnvFor(daemon), {}, cli.dir().path());
  EXPECT_EQ(seg.exit_code, 0) << seg.err;
  EXPECT_TRUE(ReadAll(cli.dir().File("sb-1-000001.mp4")) == segment);

  std::string named = cli.dir().File("named.mp4");
  WriteAll(named, "old contents");
  auto to_file = cli.Run({"recording", "get", "sb-1", "-o", named, "--segment=1"}, EnvFor(daemon));
  EXPECT_EQ(to_file.exit_code, 0) << to_file.err;
  EXPECT_TRUE(ReadAll(named) == segment);
  auto to_stdout = cli.Run({"recording", "get", "sb-1", "-o", "-"}, EnvFor(daemon));
  EXPECT_EQ(to_stdout.exit_code, 0) << to_stdout.err;
  EXPECT_TRUE(to_stdout.out == whole);

  auto reqs = daemon.requests();
  ASSERT_EQ(reqs.size(), 4u);
  EXPECT_EQ(reqs[0].method, "GET");
  EXPECT_EQ(reqs[0].target, "/v1/sandboxes/sb-1/recording.mp4");
  EXPECT_EQ(reqs[1].target, "/v1/sandboxes/sb-1/recording/segments/000001.mp4");
  EXPECT_EQ(reqs[2].target, "/v1/sandboxes/sb-1/recording/segments/000001.mp4");
  EXPECT_EQ(reqs[3].target, "/v1/sandboxes/sb-1/recording.mp4");
  for (const auto& entry : std::filesystem::directory_iterator(cli.dir().path()))
    EXPECT_EQ(entry.path().filename().string().find(".deskbox-"), std::string::npos)
        << entry.path();
}

TEST(CliRun, FailedRecordingDownloadLeavesNoPartialFile) {
  std::atomic<int> mode = 0;
  FakeDaemon daemon([&](const Recorded&, tcp::socket& s) {
    switch (mode.load()) {
      case 0:  // cut short: the Content-Length promises more than arrives
        WriteRaw(s, "HTTP/1.1 200 OK\r\nContent-Type: video/mp4\r\nContent-Length: 400000\r\n\r\n" +
                        Pattern(150000));
        break;
      case 1:  // a chunked body that never gets its last chunk
        SendChunkedHeader(s, "video/mp4");
        SendChunk(s, Pattern(100000));
        break;
      default:
        SendError(s, 404, "not_found", "sandbox sb-1 has no recording");
    }
  });
  Cli cli;
  auto cut = cli.Run({"recording", "get", "sb-1"}, EnvFor(daemon), {}, cli.dir().path());
  EXPECT_EQ(cut.exit_code, 1);
  EXPECT_NE(cut.err.find("closed the connection"), std::string::npos) << cut.err;
  mode = 1;
  auto unfinished =
      cli.Run({"recording", "get", "sb-1", "--segment", "2"}, EnvFor(daemon), {}, cli.dir().path());
  EXPECT_EQ(unfinished.exit_code, 1);
  EXPECT_NE(unfinished.err.find("closed the connection"), std::string::npos) << unfinished.err;
  mode = 2;
  auto missing = cli.Run({"recording", "get", "sb-1"}, EnvFor(daemon), {}, cli.dir().path());
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_EQ(missing.err, "deskbox: not_found: sandbox sb-1 has no recording\n");
  // An existing file is left as it was.
  std::string keep = cli.dir().File("keep.mp4");
  WriteAll(keep, "old");
  mode = 0;
  EXPECT_EQ(cli.Run({"recording", "get", "sb-1", "-o", keep}, EnvFor(daemon)).exit_code, 1);
  EXPECT_EQ(ReadAll(keep), "old");

  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(cli.dir().path()))
    files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  // No sb-1.mp4, no sb-1-000002.mp4, no temporary left over.
  EXPECT_EQ(files, (std::vector<std::string>{"keep.mp4", "stderr", "stdin", "stdout"}));
}

TEST(CliRun, RecordingVerifyExitsWithTheOutcome) {
  std::atomic<bool> ok = true;
  FakeDaemon daemon([&](const Recorded&, tcp::socket& s) {
    if (ok) {
      Send(s, 200, R"({"ok":true,"head":"9f86d081884c7d65","events":120,"segments_checked":3,
                       "problems":[]})");
    } else {
      Send(s, 200, R"({"ok":false,"head":"9f86d081884c7d65","events":120,"segments_checked":3,
                       "problems":[{"kind":"segment_modified","index":2,"file":"000002.mp4",
                                    "message":"000002.mp4: SHA-256 differs"},
                                   {"kind":"segment_missing","index":1,"file":"000001.mp4",
                                    "message":"000001.mp4 is gone"}]})");
    }
  });
  Cli cli;
  auto good = cli.Run({"recording", "verify", "sb-1"}, EnvFor(daemon));
  EXPECT_EQ(good.exit_code, 0) << good.err;
  EXPECT_EQ(good.out, "ok: 120 events, 3 segments checked, head 9f86d081884c7d65\n");
  EXPECT_EQ(good.err, "");
  ok = false;
  auto bad = cli.Run({"recording", "verify", "sb-1"}, EnvFor(daemon));
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_EQ(bad.out,
            "not ok: 2 problems; 120 events, 3 segments checked, head 9f86d081884c7d65\n"
            "segment_modified  000002.mp4  000002.mp4: SHA-256 differs\n"
            "segment_missing   000001.mp4  000001.mp4 is gone\n");
  auto bad_json = cli.Run({"--json", "recording", "verify", "sb-1"}, EnvFor(daemon));
  EXPECT_EQ(bad_json.exit_code, 1);
  EXPECT_EQ(json::parse(bad_json.out)["ok"], false);
  auto reqs = daemon.requests();
  ASSERT_EQ(reqs.size(), 3u);
  EXPECT_EQ(reqs[0].method, "GET");
  EXPECT_EQ(reqs[0].target, "/v1/sandboxes/sb-1/events/verify");
}

TEST(CliRun, RecordingRmSendsDelete) {
  FakeDaemon daemon([](const Recorded& r, tcp::socket& s) {
    if (r.target.starts_with("/v1/sandboxes/sb-9/"))
      SendError(s, 404, "not_found", "no sandbox sb-9");
    else
      Send(s, 204, "");
  });
  Cli cli;
  auto r = cli.Run({"recording", "rm", "sb-1"}, EnvFor(daemon));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  auto missing = cli.Run({"recording", "rm", "sb-9"}, EnvFor(daemon));
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_EQ(missing.err, "deskbox: not_found: no sandbox sb-9\n");
  auto reqs = daemon.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].method, "DELETE");
  EXPECT_EQ(reqs[0].target, "/v1/sandboxes/sb-1/recording");
  EXPECT_EQ(reqs[0].body, "");
}

TEST(CliRun, ReplayPrintsTheUrlWithTheNewToken) {
  constexpr std::string_view kToken = "dbt_0a1b2c3d4e5f+/=";  // odd characters to encode
  FakeDaemon daemon([&](const Recorded&, tcp::socket& s) {
    ordered_json created = {{"id", "tok_1"},        {"token", kToken},   {"scope", "replay"},
                            {"sandbox_id", "sb-1"}, {"created_at", "c"}, {"expires_at", "e"}};
    Send(s, 201, created.dump());
  });
  Cli cli;
  auto r = cli.Run({"replay", "sb-1", "--ttl", "600"}, EnvFor(daemon, "/pre/"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            daemon.Url("/pre") + "/v1/sandboxes/sb-1/replay?token=dbt_0a1b2c3d4e5f%2B%2F%3D\n");
  auto plain = cli.Run({"replay", "sb-1"}, EnvFor(daemon));
  EXPECT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.out,
            daemon.Url() + "/v1/sandboxes/sb-1/replay?token=dbt_0a1b2c3d4e5f%2B%2F%3D\n");
  auto as_json = cli.Run({"--json", "replay", "sb-1"}, EnvFor(daemon));
  EXPECT_EQ(as_json.exit_code, 0) << as_json.err;
  EXPECT_EQ(json::parse(as_json.out)["id"], "tok_1");
  auto reqs = daemon.requests();
  ASSERT_EQ(reqs.size(), 3u);
  EXPECT_EQ(reqs[0].method, "POST");
  EXPECT_EQ(reqs[0].target, "/pre/v1/sandboxes/sb-1/tokens");
  EXPECT_EQ(reqs[0].content_type, "application/json");
  EXPECT_EQ(json::parse(reqs[0].body), json::parse(R"({"scope":"replay","ttl_s":600})"));
  EXPECT_EQ(json::parse(reqs[1].body), json::parse(R"({"scope":"replay"})"));
}

TEST(CliRun, ReplayWithoutATokenInTheAnswerFails) {
  FakeDaemon daemon([](const Recorded&, tcp::socket& s) { Send(s, 201, R"({"id":"tok_1"})"); });
  Cli cli;
  auto r = cli.Run({"replay", "sb-1"}, EnvFor(daemon));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "deskbox: the daemon's token response has no token\n");
}

TEST(CliRun, RecordingUsageErrorsExit2) {
  Cli cli;
  for (std::vector<std::string> args :
       std::vector<std::vector<std::string>>{{"recording"},
                                             {"recording", "ls"},
                                             {"recording", "play", "sb-1"},
                                             {"recording", "get", "sb-1", "--segment", "-1"},
                                             {"replay"}}) {
    auto r = cli.Run(args);
    EXPECT_EQ(r.exit_code, 2) << args.size();
    EXPECT_TRUE(r.out.empty());
    EXPECT_NE(r.err.find("usage: deskbox re"), std::string::npos) << r.err;
  }
  auto help = cli.Run({"recording", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_TRUE(help.out.starts_with("usage: deskbox recording ls ID")) << help.out;
  auto replay_help = cli.Run({"help", "replay"});
  EXPECT_EQ(replay_help.exit_code, 0);
  EXPECT_TRUE(replay_help.out.starts_with("usage: deskbox replay ID")) << replay_help.out;
}

}  // namespace
}  // namespace deskbox::cli
