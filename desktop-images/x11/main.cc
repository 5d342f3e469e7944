// deskbox-x11: the guest agent's X helper for typing (docs/computer-use.md, "Typing").
//
//   deskbox-x11 focus
//       Prints the focused window's WM_CLASS as "instance<TAB>class" and a newline (an empty
//       line when no window has the keyboard focus).
//   deskbox-x11 paste-primary [--timeout-ms N]
//       Pastes its standard input (UTF-8) into the focused window: owns PRIMARY with the text,
//       presses Shift+Insert (XTEST) and returns once the focused window's client has read the
//       text, i.e. has deleted the property the text was written to. A single-threaded client
//       (xterm) asks for the selection only after it has handled every event before
//       Shift+Insert, and inserts the text while handling the reply, before any later event: so
//       keys sent after this returns arrive after the text, without any wait by time. What
//       PRIMARY held before is then served again by a background process until another client
//       takes the selection.
//
// Exit status: 0 done; 2 bad usage or input; 3 no X display; 4 no window has the keyboard
// focus; 5 the focused window did not read the text in time; 6 another client took PRIMARY
// during the paste. A one-line reason goes to standard error.
#include <X11/Xatom.h>
#include <X11/Xlib.h>
#include <X11/Xutil.h>
#include <X11/extensions/XTest.h>
#include <X11/keysym.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kExitUsage = 2;
constexpr int kExitNoDisplay = 3;
constexpr int kExitNoFocus = 4;
constexpr int kExitTimeout = 5;
constexpr int kExitLost = 6;
// Larger texts would need the INCR protocol; the host pastes runs far shorter than this.
constexpr size_t kMaxTextBytes = 64 * 1024;
// How long the current owner of PRIMARY may take to hand over what it holds.
constexpr auto kSaveTimeout = std::chrono::milliseconds(1000);

int Fail(int status, std::string_view reason) {
  std::cerr << "deskbox-x11: " << reason << "\n";
  return status;
}

// Windows vanish at any time (the requestor of a selection, a closing window): their errors are
// expected, and Xlib's default handler would exit.
int IgnoreErrors(Display*, XErrorEvent*) { return 0; }

// The next event within the deadline; false once it has passed.
bool NextEvent(Display* d, XEvent* e, Clock::time_point deadline) {
  while (XPending(d) == 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{ConnectionNumber(d), POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) < 0 && errno != EINTR) return false;
  }
  XNextEvent(d, e);
  return true;
}

// The server's time now: the timestamp of a property change on our own window.
Time ServerTime(Display* d, Window w, Atom stamp) {
  XChangeProperty(d, w, stamp, XA_STRING, 8, PropModeAppend, nullptr, 0);
  XEvent e;
  XWindowEvent(d, w, PropertyChangeMask, &e);
  return e.xproperty.time;
}

// The focused window, or None when the focus is nowhere or follows the pointer.
Window FocusedWindow(Display* d) {
  Window focus = None;
  int revert = 0;
  XGetInputFocus(d, &focus, &revert);
  if (focus == PointerRoot) return None;
  return focus;
}

// WM_CLASS of `w` or of the nearest ancestor that has one.
std::optional<std::pair<std::string, std::string>> ClassOf(Display* d, Window w) {
  for (int depth = 0; w != None && depth < 32; ++depth) {
    XClassHint hint{};
    if (XGetClassHint(d, w, &hint) != 0) {
      std::pair<std::string, std::string> out{hint.res_name ? hint.res_name : "",
                                               hint.res_class ? hint.res_class : ""};
      if (hint.res_name) XFree(hint.res_name);
      if (hint.res_class) XFree(hint.res_class);
      return out;
    }
    Window root = None, parent = None;
    Window* children = nullptr;
    unsigned n = 0;
    if (XQueryTree(d, w, &root, &parent, &children, &n) == 0) break;
    if (children) XFree(children);
    if (parent == root) break;
    w = parent;
  }
  return std::nullopt;
}

// The bits of a resource id that name the client that created it: every window of one
// connection shares them (the server's resource-id mask, from the connection setup; Xlib keeps
// it in the display structure's fourth private id, "resource_mask" in Xlibint.h).
XID ClientBits(Display* d, XID id) {
  XID mask = reinterpret_cast<_XPrivDisplay>(d)->private4;
  return id & ~mask;
}

std::optional<std::string> Latin1(std::string_view utf8) {
  std::string out;
  for (size_t i = 0; i < utf8.size(); ++i) {
    auto c = static_cast<unsigned char>(utf8[i]);
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else if ((c == 0xC2 || c == 0xC3) && i + 1 < utf8.size()) {
      out.push_back(static_cast<char>(((c & 0x03) << 6) | (utf8[++i] & 0x3F)));
    } else {
      return std::nullopt;
    }
  }
  return out;
}

struct Atoms {
  Atom targets, utf8, text, timestamp, incr, saved, stamp;
  explicit Atoms(Display* d)
      : targets(XInternAtom(d, "TARGETS", False)),
        utf8(XInternAtom(d, "UTF8_STRING", False)),
        text(XInternAtom(d, "TEXT", False)),
        timestamp(XInternAtom(d, "TIMESTAMP", False)),
        incr(XInternAtom(d, "INCR", False)),
        saved(XInternAtom(d, "DESKBOX_SAVED", False)),
        stamp(XInternAtom(d, "DESKBOX_STAMP", False)) {}
};

// Answers one SelectionRequest for PRIMARY holding `text` (owned since `owned`). Returns the
// property written when the answer carried the text, None otherwise.
Atom Answer(Display* d, const Atoms& a, const XSelectionRequestEvent& r, const std::string& text,
            Time owned, bool watch_requestor) {
  Atom property = r.property != None ? r.property : r.target;  // obsolete requestors: target
  Atom written = None;
  if (r.target == a.targets) {
    Atom list[] = {a.targets, a.timestamp, a.utf8, XA_STRING, a.text};
    XChangeProperty(d, r.requestor, property, XA_ATOM, 32, PropModeReplace,
                    reinterpret_cast<unsigned char*>(list), std::size(list));
  } else if (r.target == a.timestamp) {
    long t = static_cast<long>(owned);
    XChangeProperty(d, r.requestor, property, XA_INTEGER, 32, PropModeReplace,
                    reinterpret_cast<unsigned char*>(&t), 1);
  } else if (r.target == a.utf8 || r.target == a.text || r.target == XA_STRING) {
    std::optional<std::string> data = text;
    if (r.target == XA_STRING) data = Latin1(text);
    if (data) {
      // Watch the requestor's property before writing it: its deletion is the proof of reading.
      if (watch_requestor) XSelectInput(d, r.requestor, PropertyChangeMask);
      XChangeProperty(d, r.requestor, property, r.target == XA_STRING ? XA_STRING : a.utf8, 8,
                      PropModeReplace, reinterpret_cast<const unsigned char*>(data->data()),
                      static_cast<int>(data->size()));
      written = property;
    } else {
      property = None;
    }
  } else {
    property = None;
  }
  XEvent notify{};
  notify.xselection.type = SelectionNotify;
  notify.xselection.display = d;
  notify.xselection.requestor = r.requestor;
  notify.xselection.selection = r.selection;
  notify.xselection.target = r.target;
  notify.xselection.property = property;
  notify.xselection.time = r.time;
  XSendEvent(d, r.requestor, False, NoEventMask, &notify);
  XFlush(d);
  return written;
}

// What PRIMARY holds now, as UTF-8 text (nullopt when nothing owns it, it holds no text, or
// its owner does not answer in time).
std::optional<std::string> ReadPrimary(Display* d, const Atoms& a, Window w, Time t) {
  if (XGetSelectionOwner(d, XA_PRIMARY) == None) return std::nullopt;
  XConvertSelection(d, XA_PRIMARY, a.utf8, a.saved, w, t);
  XFlush(d);
  const auto deadline = Clock::now() + kSaveTimeout;
  XEvent e;
  while (NextEvent(d, &e, deadline)) {
    if (e.type != SelectionNotify || e.xselection.requestor != w) continue;
    if (e.xselection.property == None) return std::nullopt;
    Atom type = None;
    int format = 0;
    unsigned long n = 0, after = 0;
    unsigned char* data = nullptr;
    if (XGetWindowProperty(d, w, a.saved, 0, kMaxTextBytes / 4, True, AnyPropertyType, &type,
                           &format, &n, &after, &data) != Success)
      return std::nullopt;
    std::optional<std::string> out;
    if (type != a.incr && format == 8 && after == 0 && data)
      out = std::string(reinterpret_cast<char*>(data), n);
    if (data) XFree(data);
    return out;
  }
  return std::nullopt;
}

// Serves `text` as PRIMARY until another client takes it (the restored selection).
[[noreturn]] void ServeUntilTaken(Display* d, const Atoms& a, const std::string& text,
                                  Time owned) {
  for (;;) {
    XEvent e;
    XNextEvent(d, &e);
    if (e.type == SelectionClear) _exit(0);
    if (e.type == SelectionRequest && e.xselectionrequest.selection == XA_PRIMARY)
      Answer(d, a, e.xselectionrequest, text, owned, false);
  }
}

int Focus(Display* d) {
  Window focus = FocusedWindow(d);
  auto cls = focus == None ? std::nullopt : ClassOf(d, focus);
  if (cls)
    std::cout << cls->first << "\t" << cls->second << "\n";
  else
    std::cout << "\n";
  return 0;
}

int PastePrimary(Display* d, std::chrono::milliseconds timeout) {
  std::string text{std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
  if (text.empty()) return 0;
  if (text.size() > kMaxTextBytes) return Fail(kExitUsage, "text over 64 KiB");
  const Atoms a(d);
  Window focus = FocusedWindow(d);
  if (focus == None) return Fail(kExitNoFocus, "no window has the keyboard focus");
  const XID target_client = ClientBits(d, focus);

  Window root = DefaultRootWindow(d);
  Window w = XCreateSimpleWindow(d, root, -10, -10, 1, 1, 0, 0, 0);
  XSelectInput(d, w, PropertyChangeMask);
  Time now = ServerTime(d, w, a.stamp);
  std::optional<std::string> saved = ReadPrimary(d, a, w, now);

  now = ServerTime(d, w, a.stamp);
  XSetSelectionOwner(d, XA_PRIMARY, w, now);
  if (XGetSelectionOwner(d, XA_PRIMARY) != w) return Fail(kExitLost, "could not own PRIMARY");
  const Time owned = now;

  // Shift+Insert: xterm's "insert-selection(PRIMARY)" key (Ctrl+V is no paste key there).
  KeyCode shift = XKeysymToKeycode(d, XK_Shift_L);
  KeyCode insert = XKeysymToKeycode(d, XK_Insert);
  if (shift == 0 || insert == 0) return Fail(kExitUsage, "no keycode for Shift_L or Insert");
  XTestFakeKeyEvent(d, shift, True, CurrentTime);
  XTestFakeKeyEvent(d, insert, True, CurrentTime);
  XTestFakeKeyEvent(d, insert, False, CurrentTime);
  XTestFakeKeyEvent(d, shift, False, CurrentTime);
  XSync(d, False);

  // Requests from other clients (the VNC server announcing the new selection to its viewers)
  // are answered too; only the focused window's client reading the text ends the wait.
  const auto deadline = Clock::now() + timeout;
  Window watched = None;
  Atom watched_property = None;
  bool read = false;
  XEvent e;
  while (!read) {
    if (!NextEvent(d, &e, deadline))
      return Fail(kExitTimeout, "the focused window did not read the pasted text");
    if (e.type == SelectionClear && e.xselectionclear.selection == XA_PRIMARY)
      return Fail(kExitLost, "another client took PRIMARY during the paste");
    if (e.type == SelectionRequest && e.xselectionrequest.selection == XA_PRIMARY) {
      const auto& r = e.xselectionrequest;
      bool from_target = ClientBits(d, r.requestor) == target_client;
      Atom written = Answer(d, a, r, text, owned, from_target);
      if (from_target && written != None) {
        watched = r.requestor;
        watched_property = written;
      }
    } else if (e.type == PropertyNotify && e.xproperty.window == watched &&
               e.xproperty.atom == watched_property && e.xproperty.state == PropertyDelete) {
      read = true;
    }
  }
  if (watched != None) XSelectInput(d, watched, NoEventMask);

  if (!saved) {
    XSetSelectionOwner(d, XA_PRIMARY, None, ServerTime(d, w, a.stamp));
    XSync(d, False);
    return 0;
  }
  // Serve what PRIMARY held before from a background process that outlives this one.
  XSync(d, False);
  std::cout.flush();
  pid_t pid = fork();
  if (pid < 0) return 0;  // the paste is done; only the restore is lost
  if (pid > 0) _exit(0);  // leaves the connection to the child
  setsid();
  int null_fd = open("/dev/null", O_RDWR);
  if (null_fd >= 0) {
    dup2(null_fd, 0);
    dup2(null_fd, 1);
    dup2(null_fd, 2);
    if (null_fd > 2) close(null_fd);
  }
  ServeUntilTaken(d, a, *saved, owned);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string_view> args(argv + 1, argv + argc);
  if (args.empty()) return Fail(kExitUsage, "usage: deskbox-x11 focus | paste-primary [--timeout-ms N]");
  std::chrono::milliseconds timeout{5000};
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--timeout-ms" && i + 1 < args.size()) {
      long ms = std::strtol(std::string(args[++i]).c_str(), nullptr, 10);
      if (ms <= 0 || ms > 60000) return Fail(kExitUsage, "--timeout-ms: 1..60000");
      timeout = std::chrono::milliseconds(ms);
    } else {
      return Fail(kExitUsage, "unknown argument: " + std::string(args[i]));
    }
  }
  Display* d = XOpenDisplay(nullptr);
  if (!d) return Fail(kExitNoDisplay, "cannot open the X display");
  XSetErrorHandler(IgnoreErrors);
  if (args[0] == "focus") return Focus(d);
  if (args[0] == "paste-primary") {
    int xtest_event = 0, xtest_error = 0, major = 0, minor = 0;
    if (!XTestQueryExtension(d, &xtest_event, &xtest_error, &major, &minor))
      return Fail(kExitNoDisplay, "the X server has no XTEST extension");
    return PastePrimary(d, timeout);
  }
  return Fail(kExitUsage, "unknown command: " + std::string(args[0]));
}
