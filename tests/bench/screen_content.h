#pragma once
// Screen-like frames for the recording benchmark (recording_encode_bench.cc): what a sandbox's
// screen shows while an agent works, as BGRX frames the size of the screen.
//
// Drawn() paints a browser window in the manner of the sandbox's Chromium: tab strip and
// toolbar, then a long page of anti-aliased text (headings, paragraphs, links, code blocks,
// tables, photo-like pictures) beside a sidebar; a terminal window to drag over it; the pointer.
// The glyphs are made up (strokes and rings on a grid, no font needed), but they have what makes
// text costly to encode: thin strokes with grey edges on a flat background, a new arrangement
// at every line.
// FromScreens() builds the same scenes from real screenshots (PNG, e.g.
// GET /v1/sandboxes/{id}/screenshot?format=png): stacked into one tall page to scroll, a crop of
// one as the window to drag.
//
// Scenes, each frame `i` at the recording's frame rate:
//   kScroll  the page scrolls 40 px a frame (600 px/s at 15 fps), up and down: every frame
//            differs everywhere below the toolbar;
//   kDrag    the terminal window is dragged across the still page (about 190 px/s);
//   kType    one character a frame is typed into a text field on the still page.
#include <cstdint>
#include <expected>
#include <string>
#include <vector>

namespace deskbox::bench {

enum class Scene { kScroll, kDrag, kType };
const char* SceneName(Scene s);

struct Image {
  uint32_t width = 0, height = 0;
  std::vector<uint8_t> bgrx;  // width * height * 4
  uint8_t* Row(uint32_t y) { return bgrx.data() + size_t{y} * width * 4; }
  const uint8_t* Row(uint32_t y) const { return bgrx.data() + size_t{y} * width * 4; }
};

class ScreenContent {
 public:
  static ScreenContent Drawn(uint32_t width, uint32_t height);
  // PNG files of one size (an even width and height).
  static std::expected<ScreenContent, std::string> FromScreens(
      const std::vector<std::string>& pngs);

  uint32_t width() const { return width_; }
  uint32_t height() const { return height_; }
  // Frame `i` of `scene` into `out` (width * height * 4 bytes).
  void Paint(Scene scene, int i, uint8_t* out) const;

 private:
  ScreenContent() = default;
  void PaintPage(int offset, uint8_t* out) const;

  uint32_t width_ = 0, height_ = 0;
  Image top_;     // what does not scroll (the browser's tab strip and toolbar); may be empty
  Image page_;    // what scrolls below it, taller than the screen
  Image window_;  // dragged over the page
  int still_offset_ = 0;  // where the page stands in the drag and type scenes
  int field_x_ = 0, field_y_ = 0, field_w_ = 0;  // the text field typed into
};

}  // namespace deskbox::bench
