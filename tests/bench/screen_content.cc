#include "screen_content.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <string_view>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libswscale/swscale.h>
}

namespace deskbox::bench {

namespace {

struct Rgb {
  uint8_t r, g, b;
};

// A small deterministic generator: the same frames in every run.
class Random {
 public:
  explicit Random(uint64_t seed) : s_(seed * 6364136223846793005ull + 1442695040888963407ull) {}
  uint32_t Next() {
    s_ = s_ * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(s_ >> 33);
  }
  int Between(int lo, int hi) {
    return lo + static_cast<int>(Next() % static_cast<uint32_t>(hi - lo + 1));
  }
  bool OneIn(int n) { return Next() % static_cast<uint32_t>(n) == 0; }

 private:
  uint64_t s_;
};

// Where drawing goes: an Image or a frame being painted.
struct Canvas {
  Canvas(uint32_t w, uint32_t h, uint8_t* p) : width(w), height(h), px(p) {}
  Canvas(Image& im)
      : width(im.width),
        height(im.height),
        px(im.bgrx.data()) {}  // implicit: an Image is drawn on as a frame is
  uint8_t* Row(uint32_t y) const { return px + size_t{y} * width * 4; }
  uint32_t width, height;
  uint8_t* px;
};

Image Blank(uint32_t w, uint32_t h, Rgb c) {
  Image im{w, h, std::vector<uint8_t>(size_t{w} * h * 4)};
  for (size_t i = 0; i < size_t{w} * h; ++i) {
    im.bgrx[i * 4] = c.b;
    im.bgrx[i * 4 + 1] = c.g;
    im.bgrx[i * 4 + 2] = c.r;
  }
  return im;
}

void Fill(Canvas im, int x, int y, int w, int h, Rgb c) {
  int x0 = std::max(0, x), y0 = std::max(0, y);
  int x1 = std::min<int>(static_cast<int>(im.width), x + w),
      y1 = std::min<int>(static_cast<int>(im.height), y + h);
  for (int yy = y0; yy < y1; ++yy) {
    uint8_t* p = im.Row(static_cast<uint32_t>(yy));
    for (int xx = x0; xx < x1; ++xx) {
      p[xx * 4] = c.b;
      p[xx * 4 + 1] = c.g;
      p[xx * 4 + 2] = c.r;
    }
  }
}

void Frame(Canvas im, int x, int y, int w, int h, Rgb c) {
  Fill(im, x, y, w, 1, c);
  Fill(im, x, y + h - 1, w, 1, c);
  Fill(im, x, y, 1, h, c);
  Fill(im, x + w - 1, y, 1, h, c);
}

// ---- glyphs ----------------------------------------------------------------------------------

// One character's coverage (0..255), cell-sized. Made of 2–4 strokes between points of a 3×3
// grid (the x-height, or ascender/descender for the letters that have them) and for round
// letters a ring; anti-aliased by the distance of each pixel's centre to the nearest stroke.
struct Glyph {
  int w = 0, h = 0, advance = 0;
  std::vector<uint8_t> alpha;
};

double SegmentDistance(double px, double py, double ax, double ay, double bx, double by) {
  double vx = bx - ax, vy = by - ay, wx = px - ax, wy = py - ay;
  double len2 = vx * vx + vy * vy;
  double t = len2 > 0 ? std::clamp((wx * vx + wy * vy) / len2, 0.0, 1.0) : 0.0;
  double dx = px - (ax + t * vx), dy = py - (ay + t * vy);
  return std::sqrt(dx * dx + dy * dy);
}

Glyph MakeGlyph(char c, double scale) {
  constexpr int kCellW = 8, kCellH = 16;
  Glyph g{static_cast<int>(std::ceil(kCellW * scale)),
          static_cast<int>(std::ceil(kCellH * scale)),
          static_cast<int>(std::ceil(kCellW * scale)),
          {}};
  g.alpha.assign(size_t(g.w) * size_t(g.h), 0);
  if (c == ' ') return g;
  Random rnd(static_cast<uint64_t>(static_cast<unsigned char>(c)) * 7919);
  std::string_view asc = "bdfhklt", desc = "gjpqy", round = "abdegopqsCDGOQS0689";
  bool upper = (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  bool lower = c >= 'a' && c <= 'z';
  double top = upper || asc.find(c) != std::string_view::npos ? 2.5 : 6.0;
  double bottom = desc.find(c) != std::string_view::npos ? 14.5 : 12.0;
  std::array<double, 3> xs = {1.5, 4.0, 6.5};
  std::array<double, 3> ys = {top, (top + 12.0) / 2, bottom};
  struct Stroke {
    double ax, ay, bx, by;
  };
  std::vector<Stroke> strokes;
  bool ring = lower || upper ? round.find(c) != std::string_view::npos : false;
  if (!lower && !upper) {  // punctuation: a dot or a short bar
    if (rnd.OneIn(2))
      strokes.push_back({4, 11.5, 4, 12});
    else
      strokes.push_back({4, 4, 4, 12});
  } else {
    int n = ring ? 1 : rnd.Between(2, 3);
    if (asc.find(c) != std::string_view::npos || desc.find(c) != std::string_view::npos) {
      double x = xs[rnd.Between(0, 2)];
      strokes.push_back({x, top, x, bottom});  // the stem
    }
    for (int i = 0; i < n; ++i) {
      auto p = rnd.Between(0, 8), q = rnd.Between(0, 8);
      if (p == q) q = (q + 4) % 9;
      strokes.push_back({xs[p % 3], ys[p / 3], xs[q % 3], ys[q / 3]});
    }
  }
  double half = 0.62 * std::max(1.0, scale * 0.85);
  for (int y = 0; y < g.h; ++y)
    for (int x = 0; x < g.w; ++x) {
      double px = (x + 0.5) / scale, py = (y + 0.5) / scale, d = 1e9;
      for (const auto& s : strokes)
        d = std::min(d, SegmentDistance(px, py, s.ax, s.ay, s.bx, s.by) * scale);
      if (ring) {
        double cx = 4.0, cy = 9.0, r = 2.6, dx = px - cx, dy = py - cy;
        d = std::min(d, std::abs(std::sqrt(dx * dx + dy * dy) - r) * scale);
      }
      double a = std::clamp(half + 0.5 - d, 0.0, 1.0);
      g.alpha[size_t(y) * size_t(g.w) + size_t(x)] = static_cast<uint8_t>(a * 255 + 0.5);
    }
  return g;
}

class Font {
 public:
  explicit Font(double scale) {
    for (int c = 32; c < 127; ++c) glyphs_[size_t(c - 32)] = MakeGlyph(static_cast<char>(c), scale);
  }
  const Glyph& Of(char c) const { return glyphs_[size_t((c >= 32 && c < 127 ? c : '?') - 32)]; }
  int Advance() const { return glyphs_[0].advance; }
  int Height() const { return glyphs_[0].h; }
  // Draws `text` with its top left at (x, y); returns the x after it.
  int Draw(Canvas im, int x, int y, std::string_view text, Rgb color) const {
    for (char c : text) {
      const Glyph& g = Of(c);
      for (int gy = 0; gy < g.h; ++gy) {
        int yy = y + gy;
        if (yy < 0 || yy >= static_cast<int>(im.height)) continue;
        uint8_t* row = im.Row(static_cast<uint32_t>(yy));
        for (int gx = 0; gx < g.w; ++gx) {
          int xx = x + gx;
          unsigned a = g.alpha[size_t(gy) * size_t(g.w) + size_t(gx)];
          if (!a || xx < 0 || xx >= static_cast<int>(im.width)) continue;
          uint8_t* p = row + xx * 4;
          p[0] = static_cast<uint8_t>((p[0] * (255 - a) + color.b * a) / 255);
          p[1] = static_cast<uint8_t>((p[1] * (255 - a) + color.g * a) / 255);
          p[2] = static_cast<uint8_t>((p[2] * (255 - a) + color.r * a) / 255);
        }
      }
      x += g.advance;
    }
    return x;
  }

 private:
  std::array<Glyph, 95> glyphs_;
};

// Words with English letter frequencies.
std::string Word(Random& rnd) {
  static constexpr std::string_view kLetters =
      "eeeeeeeeeeeetttttttttaaaaaaaaoooooooiiiiiiinnnnnnnsssssshhhhhhrrrrrrddddlllluuucccmmmwwffggy"
      "yppbbvkjxqz";
  std::string w;
  int n = rnd.Between(1, 4) + rnd.Between(1, 5);
  for (int i = 0; i < n; ++i) w += kLetters[rnd.Next() % kLetters.size()];
  if (rnd.OneIn(12)) w[0] = static_cast<char>(w[0] - 'a' + 'A');
  if (rnd.OneIn(9)) w += rnd.OneIn(2) ? ',' : '.';
  return w;
}

// A photo-like picture: smooth colour fields with fine noise, the hardest part of a page to code.
void Picture(Canvas im, int x0, int y0, int w, int h, Random& rnd) {
  double f1 = 0.01 + rnd.Between(0, 20) / 1000.0, f2 = 0.02 + rnd.Between(0, 30) / 1000.0;
  Rgb a{uint8_t(rnd.Between(40, 220)), uint8_t(rnd.Between(40, 220)),
        uint8_t(rnd.Between(40, 220))};
  Rgb b{uint8_t(rnd.Between(20, 200)), uint8_t(rnd.Between(60, 240)),
        uint8_t(rnd.Between(20, 200))};
  for (int y = 0; y < h; ++y) {
    if (y0 + y < 0 || y0 + y >= static_cast<int>(im.height)) continue;
    uint8_t* row = im.Row(static_cast<uint32_t>(y0 + y));
    for (int x = 0; x < w; ++x) {
      if (x0 + x >= static_cast<int>(im.width)) break;
      double t =
          0.5 + 0.25 * std::sin(x * f1 + y * f2) + 0.25 * std::sin(x * f2 * 0.7 - y * f1 * 1.3);
      int noise = static_cast<int>(rnd.Next() % 17) - 8;
      auto mix = [&](uint8_t p, uint8_t q) {
        return static_cast<uint8_t>(
            std::clamp(static_cast<int>(p * (1 - t) + q * t) + noise, 0, 255));
      };
      uint8_t* p = row + (x0 + x) * 4;
      p[0] = mix(a.b, b.b);
      p[1] = mix(a.g, b.g);
      p[2] = mix(a.r, b.r);
    }
  }
}

constexpr Rgb kText{31, 35, 40}, kMuted{89, 99, 110}, kLink{9, 105, 218}, kRule{208, 215, 222},
    kPanel{246, 248, 250}, kWhite{255, 255, 255};

// The page: sidebar, a main column of blocks, a right column of boxes.
Image DrawPage(uint32_t width, uint32_t height, const Font& body, const Font& heading) {
  Image page = Blank(width, height, kWhite);
  Random rnd(42);
  int lh = body.Height() + 5;
  int side_w = static_cast<int>(width) / 6, right_w = static_cast<int>(width) / 6;
  Fill(page, 0, 0, side_w, static_cast<int>(height), kPanel);
  Fill(page, side_w, 0, 1, static_cast<int>(height), kRule);
  for (int y = 16; y + lh < static_cast<int>(height); y += lh + 9) {
    std::string item = Word(rnd) + " " + Word(rnd);
    body.Draw(page, 20, y, item, rnd.OneIn(7) ? kText : kLink);
  }
  int main_x = side_w + 40, main_w = static_cast<int>(width) - side_w - right_w - 80;
  int right_x = main_x + main_w + 30;
  for (int y = 30; y + 300 < static_cast<int>(height);) {
    Frame(page, right_x, y + 10, right_w - 40, 180, kRule);
    for (int ly = y + 24; ly < y + 170; ly += lh) {
      std::string line;
      while (static_cast<int>(line.size() + 8) * body.Advance() < right_w - 60)
        line += Word(rnd) + " ";
      body.Draw(page, right_x + 10, ly, line, kMuted);
    }
    y += 420;
  }
  int chars = main_w / body.Advance();
  for (int y = 30; y + 400 < static_cast<int>(height);) {
    int kind = rnd.Between(0, 9);
    if (kind == 0) {  // heading
      std::string h = Word(rnd) + " " + Word(rnd) + " " + Word(rnd);
      h[0] = static_cast<char>(std::toupper(h[0]));
      heading.Draw(page, main_x, y + 10, h, kText);
      y += heading.Height() + 24;
      Fill(page, main_x, y - 8, main_w, 1, kRule);
    } else if (kind == 1) {  // code block
      int lines = rnd.Between(4, 10);
      Fill(page, main_x, y, main_w, lines * lh + 20, kPanel);
      Frame(page, main_x, y, main_w, lines * lh + 20, kRule);
      for (int l = 0; l < lines; ++l) {
        int x = main_x + 14 + 4 * body.Advance() * rnd.Between(0, 2);
        for (int t = rnd.Between(2, 6); t > 0; --t) {
          static constexpr Rgb kTokens[] = {
              {207, 34, 46}, {5, 80, 174}, {17, 99, 41}, {31, 35, 40}};
          x = body.Draw(page, x, y + 10 + l * lh, Word(rnd) + (rnd.OneIn(3) ? "(" : " "),
                        kTokens[rnd.Between(0, 3)]);
        }
      }
      y += lines * lh + 40;
    } else if (kind == 2) {  // picture and caption
      int w = rnd.Between(main_w / 3, main_w * 2 / 3), h = rnd.Between(140, 260);
      Picture(page, main_x, y, w, h, rnd);
      body.Draw(page, main_x, y + h + 6, Word(rnd) + " " + Word(rnd) + " " + Word(rnd), kMuted);
      y += h + lh + 26;
    } else if (kind == 3) {  // table
      int rows = rnd.Between(3, 7), cols = 4, cw = main_w / cols;
      for (int r = 0; r <= rows; ++r) {
        if (r == 0) Fill(page, main_x, y, main_w, lh + 8, kPanel);
        for (int col = 0; col < cols; ++col)
          body.Draw(page, main_x + col * cw + 8, y + 4 + r * (lh + 8), Word(rnd), kText);
        Fill(page, main_x, y + r * (lh + 8), main_w, 1, kRule);
      }
      Fill(page, main_x, y + (rows + 1) * (lh + 8), main_w, 1, kRule);
      y += (rows + 1) * (lh + 8) + 24;
    } else {  // paragraph, some words links
      int lines = rnd.Between(3, 8);
      for (int l = 0; l < lines; ++l) {
        int x = main_x, used = 0;
        int limit = l == lines - 1 ? chars * rnd.Between(3, 9) / 10 : chars;
        while (true) {
          std::string w = Word(rnd);
          if (used + static_cast<int>(w.size()) > limit) break;
          bool link = rnd.OneIn(14);
          int x2 = body.Draw(page, x, y + l * lh, w, link ? kLink : kText);
          if (link) Fill(page, x, y + l * lh + body.Height() - 2, x2 - x, 1, kLink);
          x = body.Draw(page, x2, y + l * lh, " ", kText);
          used += static_cast<int>(w.size()) + 1;
        }
      }
      y += lines * lh + 14;
    }
  }
  return page;
}

// Chromium's tab strip and toolbar.
Image DrawBrowserTop(uint32_t width, const Font& body) {
  Image top = Blank(width, 74, {222, 225, 230});
  Fill(top, 8, 6, 240, 28, kWhite);
  body.Draw(top, 20, 12, "Deskbox docs - recording", kText);
  Fill(top, 0, 34, static_cast<int>(width), 40, kWhite);
  Fill(top, 120, 40, static_cast<int>(width) - 240, 28, {241, 243, 244});
  body.Draw(top, 140, 46, "https://docs.example.org/guide/recording.html#segments", kMuted);
  for (int i = 0; i < 3; ++i) Fill(top, 16 + i * 32, 46, 16, 16, {95, 99, 104});
  Fill(top, 0, 73, static_cast<int>(width), 1, kRule);
  return top;
}

// A terminal window with a title bar.
Image DrawTerminal(const Font& body) {
  Image win = Blank(600, 380, {30, 30, 30});
  Fill(win, 0, 0, 600, 28, {60, 60, 60});
  body.Draw(win, 12, 6, "user@sandbox: ~/project", {220, 220, 220});
  Random rnd(7);
  int lh = body.Height() + 4;
  for (int y = 36; y + lh < 376; y += lh) {
    int x = 8;
    if (rnd.OneIn(3)) x = body.Draw(win, x, y, "$ ", {106, 153, 85});
    for (int t = rnd.Between(2, 7); t > 0 && x < 560; --t)
      x = body.Draw(win, x, y, Word(rnd) + " ", {212, 212, 212});
  }
  Frame(win, 0, 0, 600, 380, {90, 90, 90});
  return win;
}

// The X pointer: black outline, white fill.
constexpr std::string_view kPointer[] = {
    "X           ", "XX          ", "X.X         ", "X..X        ", "X...X       ",
    "X....X      ", "X.....X     ", "X......X    ", "X.......X   ", "X........X  ",
    "X.........X ", "X......XXXXX", "X...X..X    ", "X..XX..X    ", "X.X  X..X   ",
    "XX   X..X   ", "X     X..X  ", "      X..X  ", "       XX   "};

void DrawPointer(uint8_t* out, uint32_t width, uint32_t height, int x, int y) {
  for (int r = 0; r < static_cast<int>(std::size(kPointer)); ++r)
    for (int c = 0; c < static_cast<int>(kPointer[r].size()); ++c) {
      char m = kPointer[r][size_t(c)];
      int xx = x + c, yy = y + r;
      if (m == ' ' || xx < 0 || yy < 0 || xx >= static_cast<int>(width) ||
          yy >= static_cast<int>(height))
        continue;
      uint8_t v = m == 'X' ? 0 : 255;
      std::memset(out + (size_t(yy) * width + size_t(xx)) * 4, v, 3);
    }
}

// Position `i * step` bouncing between 0 and `range`.
int Bounce(int i, int step, int range) {
  if (range <= 0) return 0;
  int p = (i * step) % (2 * range);
  return p <= range ? p : 2 * range - p;
}

const Font& BodyFont() {
  static const Font f(1.0);
  return f;
}

std::expected<Image, std::string> ReadPng(const std::string& path) {
  AVFormatContext* fmt = nullptr;
  if (int e = avformat_open_input(&fmt, path.c_str(), nullptr, nullptr); e < 0)
    return std::unexpected(fmt::format("{}: cannot open ({})", path, e));
  std::unique_ptr<AVFormatContext, void (*)(AVFormatContext*)> fmt_guard(
      fmt, [](AVFormatContext* f) { avformat_close_input(&f); });
  if (avformat_find_stream_info(fmt, nullptr) < 0 || fmt->nb_streams < 1)
    return std::unexpected(path + ": no picture in it");
  const AVCodecParameters* par = fmt->streams[0]->codecpar;
  const AVCodec* dec = avcodec_find_decoder(par->codec_id);
  if (!dec) return std::unexpected(path + ": no decoder");
  std::unique_ptr<AVCodecContext, void (*)(AVCodecContext*)> ctx(
      avcodec_alloc_context3(dec), [](AVCodecContext* c) { avcodec_free_context(&c); });
  if (avcodec_parameters_to_context(ctx.get(), par) < 0 ||
      avcodec_open2(ctx.get(), dec, nullptr) < 0)
    return std::unexpected(path + ": cannot decode");
  AVPacket* pkt = av_packet_alloc();
  AVFrame* frame = av_frame_alloc();
  std::expected<Image, std::string> out = std::unexpected(path + ": no frame decoded");
  while (av_read_frame(fmt, pkt) >= 0) {
    bool got =
        avcodec_send_packet(ctx.get(), pkt) >= 0 && avcodec_receive_frame(ctx.get(), frame) >= 0;
    av_packet_unref(pkt);
    if (!got) continue;
    Image im{static_cast<uint32_t>(frame->width), static_cast<uint32_t>(frame->height),
             std::vector<uint8_t>(size_t(frame->width) * size_t(frame->height) * 4)};
    SwsContext* sws = sws_getContext(
        frame->width, frame->height, static_cast<AVPixelFormat>(frame->format), frame->width,
        frame->height, AV_PIX_FMT_BGR0, SWS_POINT, nullptr, nullptr, nullptr);
    uint8_t* dst[1] = {im.bgrx.data()};
    int dst_stride[1] = {frame->width * 4};
    if (sws) {
      sws_scale(sws, frame->data, frame->linesize, 0, frame->height, dst, dst_stride);
      sws_freeContext(sws);
      out = std::move(im);
    }
    break;
  }
  av_frame_free(&frame);
  av_packet_free(&pkt);
  return out;
}

}  // namespace

const char* SceneName(Scene s) {
  switch (s) {
    case Scene::kScroll:
      return "scroll";
    case Scene::kDrag:
      return "drag";
    case Scene::kType:
      return "type";
  }
  return "?";
}

ScreenContent ScreenContent::Drawn(uint32_t width, uint32_t height) {
  ScreenContent s;
  s.width_ = width;
  s.height_ = height;
  static const Font heading(2.0);
  s.top_ = DrawBrowserTop(width, BodyFont());
  s.page_ = DrawPage(width, std::max<uint32_t>(height * 6, 4000), BodyFont(), heading);
  s.window_ = DrawTerminal(BodyFont());
  s.still_offset_ = static_cast<int>(height);
  s.field_x_ = static_cast<int>(width) / 6 + 40;
  s.field_y_ = static_cast<int>(height) / 2;
  s.field_w_ = static_cast<int>(width) / 2;
  return s;
}

std::expected<ScreenContent, std::string> ScreenContent::FromScreens(
    const std::vector<std::string>& pngs) {
  if (pngs.empty()) return std::unexpected("no screenshot given");
  std::vector<Image> shots;
  for (const auto& p : pngs) {
    auto im = ReadPng(p);
    if (!im) return std::unexpected(im.error());
    if (!shots.empty() && (im->width != shots[0].width || im->height != shots[0].height))
      return std::unexpected(p + ": not the size of the first screenshot");
    if (im->width % 2 || im->height % 2 || im->width < 640 || im->height < 400)
      return std::unexpected(p + ": sides must be even, at least 640x400");
    shots.push_back(std::move(*im));
  }
  ScreenContent s;
  s.width_ = shots[0].width;
  s.height_ = shots[0].height;
  // One tall page of the screenshots one under the other (at least two screens to scroll).
  s.page_ = Image{s.width_, 0, {}};
  for (size_t i = 0; i < std::max<size_t>(2, shots.size()); ++i) {
    const Image& im = shots[i % shots.size()];
    s.page_.bgrx.insert(s.page_.bgrx.end(), im.bgrx.begin(), im.bgrx.end());
    s.page_.height += im.height;
  }
  // The window: the middle of the last screenshot under a title bar.
  const Image& src = shots.back();
  s.window_ = Blank(600, 380, {60, 60, 60});
  for (uint32_t y = 28; y < 379; ++y)
    std::memcpy(s.window_.Row(y) + 4,
                src.Row(src.height / 2 - 190 + y) + size_t(src.width / 2 - 299) * 4, 598 * 4);
  BodyFont().Draw(s.window_, 12, 6, "a second window", {220, 220, 220});
  s.still_offset_ = 0;
  s.field_x_ = static_cast<int>(s.width_) / 6;
  s.field_y_ = static_cast<int>(s.height_) / 2;
  s.field_w_ = static_cast<int>(s.width_) / 2;
  return s;
}

void ScreenContent::PaintPage(int offset, uint8_t* out) const {
  size_t row = size_t{width_} * 4;
  uint32_t top_h = std::min(top_.height, height_);
  if (top_h) std::memcpy(out, top_.bgrx.data(), row * top_h);
  for (uint32_t y = top_h; y < height_; ++y)
    std::memcpy(out + row * y, page_.Row(static_cast<uint32_t>(offset) + y - top_h), row);
}

void ScreenContent::Paint(Scene scene, int i, uint8_t* out) const {
  int view = static_cast<int>(height_ - std::min(top_.height, height_));
  int range = static_cast<int>(page_.height) - view;
  switch (scene) {
    case Scene::kScroll: {
      PaintPage(Bounce(i, 40, range), out);
      DrawPointer(out, width_, height_, static_cast<int>(width_) / 2,
                  static_cast<int>(height_) / 2);
      return;
    }
    case Scene::kDrag: {
      PaintPage(std::min(still_offset_, range), out);
      int top = static_cast<int>(std::min(top_.height, height_));
      int x = Bounce(i, 13, static_cast<int>(width_) - static_cast<int>(window_.width));
      int y =
          top + Bounce(i, 7, static_cast<int>(height_) - top - static_cast<int>(window_.height));
      for (uint32_t r = 0;
           r < window_.height && y + static_cast<int>(r) < static_cast<int>(height_); ++r)
        std::memcpy(out + (size_t(y + static_cast<int>(r)) * width_ + size_t(x)) * 4,
                    window_.Row(r), size_t{window_.width} * 4);
      DrawPointer(out, width_, height_, x + static_cast<int>(window_.width) / 2, y + 10);
      return;
    }
    case Scene::kType: {
      PaintPage(std::min(still_offset_, range), out);
      // The text field, and the first i characters of a sentence typed into it (a line at most).
      Canvas screen(width_, height_, out);
      const Font& f = BodyFont();
      int h = f.Height() + 12;
      Fill(screen, field_x_, field_y_, field_w_, h, kWhite);
      Frame(screen, field_x_, field_y_, field_w_, h, kLink);
      static constexpr std::string_view kSentence =
          "the quick brown fox jumps over the lazy dog and types on into the field 0123456789 ";
      int per_line = (field_w_ - 16) / f.Advance();
      int n = i % per_line;
      std::string text;
      for (int k = 0; k < n; ++k) text += kSentence[size_t(k) % kSentence.size()];
      int x = f.Draw(screen, field_x_ + 8, field_y_ + 6, text, kText);
      Fill(screen, x + 1, field_y_ + 5, 1, f.Height() + 2, kText);  // the caret
      DrawPointer(out, width_, height_, field_x_ + field_w_ + 40, field_y_ + 4);
      return;
    }
  }
}

}  // namespace deskbox::bench
