#include "recorder/segment_encoder.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/error.h>
#include <libavutil/opt.h>
#include <libswscale/swscale.h>
}

namespace deskbox::recorder {

namespace {

std::string AvText(int err) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(err, buf, sizeof buf);
  return buf;
}

std::unexpected<EncoderError> Fail(std::string what, int err) {
  return std::unexpected(EncoderError{fmt::format("{}: {}", what, AvText(err))});
}

std::unexpected<EncoderError> Fail(std::string what) { return std::unexpected(EncoderError{std::move(what)}); }

}  // namespace

struct SegmentEncoder::Av {
  AVFormatContext* format = nullptr;
  AVCodecContext* codec = nullptr;
  AVStream* stream = nullptr;
  AVFrame* frame = nullptr;  // YUV 4:2:0, holding the last picture coded
  AVPacket* packet = nullptr;
  SwsContext* sws = nullptr;
  bool header_written = false;

  ~Av() {
    sws_freeContext(sws);
    av_packet_free(&packet);
    av_frame_free(&frame);
    avcodec_free_context(&codec);
    if (format) {
      if (format->pb) avio_closep(&format->pb);  // what the muxer wrote so far stays on disk
      avformat_free_context(format);
    }
  }
};

SegmentEncoder::SegmentEncoder(uint32_t width, uint32_t height, EncoderSettings settings)
    : width_(width), height_(height), settings_(std::move(settings)), av_(std::make_unique<Av>()) {}

SegmentEncoder::~SegmentEncoder() = default;

std::expected<std::unique_ptr<SegmentEncoder>, EncoderError> SegmentEncoder::Open(const std::string& path,
                                                                                  uint32_t width, uint32_t height,
                                                                                  const EncoderSettings& settings) {
  if (width < 16 || height < 16 || width > 8192 || height > 8192 || width % 2 || height % 2)
    return Fail(fmt::format("a {}x{} screen cannot be encoded: sides must be even, 16..8192", width, height));
  if (settings.keyframe_every.count() <= 0 || settings.max_fps < 1 || settings.max_fps > 60)
    return Fail("keyframe_every must be positive and max_fps 1..60");
  // The file must be new: a segment is never written over.
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0640);
  if (fd < 0) return Fail(fmt::format("{}: {}", path, std::strerror(errno)));
  ::close(fd);

  std::unique_ptr<SegmentEncoder> enc(new SegmentEncoder(width, height, settings));
  Av& av = *enc->av_;
  if (int e = avformat_alloc_output_context2(&av.format, nullptr, "mp4", path.c_str()); e < 0)
    return Fail("mp4 muxer", e);
  const AVCodec* x264 = avcodec_find_encoder_by_name("libx264");
  if (!x264) return Fail("libavcodec has no libx264 encoder");
  av.codec = avcodec_alloc_context3(x264);
  if (!av.codec) return Fail("out of memory");
  av.codec->width = static_cast<int>(width);
  av.codec->height = static_cast<int>(height);
  av.codec->pix_fmt = AV_PIX_FMT_YUV420P;
  av.codec->time_base = AVRational{1, 1000};  // frame times in ms: a variable frame rate
  av.codec->framerate = AVRational{settings.max_fps, 1};
  // Keyframes come by time (AddFrame, KeepAlive); x264's own come only after this many frames.
  av.codec->gop_size = settings.max_fps * 60;
  av.codec->max_b_frames = 0;
  av.codec->thread_count = 1;  // one core's share per sandbox at most
  if (av.format->oformat->flags & AVFMT_GLOBALHEADER) av.codec->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  av_opt_set(av.codec->priv_data, "preset", settings.preset.c_str(), 0);
  // No lookahead: each frame leaves the encoder when it is sent, so a fragment is whole on disk
  // as soon as the next keyframe arrives.
  av_opt_set(av.codec->priv_data, "tune", "zerolatency", 0);
  av_opt_set(av.codec->priv_data, "crf", std::to_string(settings.crf).c_str(), 0);
  av_opt_set(av.codec->priv_data, "forced-idr", "1", 0);  // a forced keyframe is an IDR frame
  // SPS and PPS before every keyframe too, not only in the sample entry: a joined recording
  // (mp4_join.h) whose screen size changes then plays across the change.
  av_opt_set(av.codec->priv_data, "x264-params", "repeat-headers=1", 0);
  if (int e = avcodec_open2(av.codec, x264, nullptr); e < 0) return Fail("libx264", e);

  av.stream = avformat_new_stream(av.format, nullptr);
  if (!av.stream) return Fail("out of memory");
  av.stream->time_base = AVRational{1, 1000};
  if (int e = avcodec_parameters_from_context(av.stream->codecpar, av.codec); e < 0) return Fail("stream", e);
  if (int e = avio_open(&av.format->pb, path.c_str(), AVIO_FLAG_WRITE); e < 0) return Fail(path, e);
  AVDictionary* options = nullptr;
  // An empty moov, then moof + mdat fragments: playable up to its last whole fragment. A
  // fragment ends before each keyframe and before the first frame `keyframe_every` or more after
  // its own first (a still screen's keep-alive frame): the muxer then gives its last frame the
  // duration up to that frame's time.
  av_dict_set(&options, "movflags", "frag_keyframe+empty_moov+default_base_moof", 0);
  av_dict_set(&options, "frag_duration",
              std::to_string(std::chrono::microseconds(settings.keyframe_every).count()).c_str(), 0);
  int e = avformat_write_header(av.format, &options);
  av_dict_free(&options);
  if (e < 0) return Fail("mp4 header", e);
  av.header_written = true;
  avio_flush(av.format->pb);

  av.frame = av_frame_alloc();
  av.packet = av_packet_alloc();
  if (!av.frame || !av.packet) return Fail("out of memory");
  av.frame->format = AV_PIX_FMT_YUV420P;
  av.frame->width = av.codec->width;
  av.frame->height = av.codec->height;
  if (int e2 = av_frame_get_buffer(av.frame, 0); e2 < 0) return Fail("frame", e2);
  av.sws = sws_getContext(av.codec->width, av.codec->height, AV_PIX_FMT_BGR0, av.codec->width, av.codec->height,
                          AV_PIX_FMT_YUV420P, SWS_POINT, nullptr, nullptr, nullptr);
  if (!av.sws) return Fail("no BGRX to YUV 4:2:0 conversion");
  return enc;
}

std::expected<void, EncoderError> SegmentEncoder::AddFrame(const uint8_t* bgrx, size_t stride, int64_t pts_ms) {
  if (finished_) return Fail("the segment is finished");
  if (pts_ms < 0 || pts_ms <= stats_.last_pts_ms)
    return Fail(fmt::format("frame at {} ms: frames must go forward in time (last at {} ms)", pts_ms,
                            stats_.last_pts_ms));
  if (stride < size_t{width_} * 4) return Fail("a row is shorter than the screen is wide");
  Av& av = *av_;
  // The encoder may still hold the last picture: write into buffers of our own.
  if (int e = av_frame_make_writable(av.frame); e < 0) return Fail("frame", e);
  const uint8_t* src[1] = {bgrx};
  const int src_stride[1] = {static_cast<int>(stride)};
  sws_scale(av.sws, src, src_stride, 0, static_cast<int>(height_), av.frame->data, av.frame->linesize);
  bool key = last_key_ms_ < 0 || pts_ms - last_key_ms_ >= settings_.keyframe_every.count();
  return Encode(pts_ms, key);
}

std::expected<void, EncoderError> SegmentEncoder::KeepAlive(int64_t now_ms) {
  if (finished_) return Fail("the segment is finished");
  if (stats_.frames == 0 || now_ms <= stats_.last_pts_ms) return {};
  if (now_ms - fragment_start_ms_ < settings_.keyframe_every.count()) return {};
  // The same picture again: starts a fragment and so puts the one before it on disk.
  return Repeat(now_ms);
}

std::expected<void, EncoderError> SegmentEncoder::Repeat(int64_t pts_ms, int64_t duration_ms) {
  // Predicted from the picture before, which it equals: a frame of skipped macroblocks, a dozen
  // bytes. At the stream's CRF an unchanged picture is the least complex there is, so the rate
  // control would give it a lower quantiser than the keyframe had and spend as much as half a
  // keyframe refining what is already shown; at CRF 51 the residual quantises to nothing.
  // (libx264 takes a changed `crf` at the next frame it is sent.)
  av_opt_set(av_->codec->priv_data, "crf", "51", 0);
  auto r = Encode(pts_ms, false, duration_ms);
  av_opt_set(av_->codec->priv_data, "crf", std::to_string(settings_.crf).c_str(), 0);
  return r;
}

std::expected<void, EncoderError> SegmentEncoder::Encode(int64_t pts_ms, bool keyframe, int64_t duration_ms) {
  Av& av = *av_;
  av.frame->pts = pts_ms;
  av.frame->pict_type = keyframe ? AV_PICTURE_TYPE_I : AV_PICTURE_TYPE_NONE;
  if (int e = avcodec_send_frame(av.codec, av.frame); e < 0) return Fail("encoding a frame", e);
  ++stats_.frames;
  stats_.last_pts_ms = pts_ms;
  if (keyframe) {
    ++stats_.keyframes;
    last_key_ms_ = pts_ms;
  }
  // Where the muxer starts a fragment (see Open): at a keyframe, or once the fragment is long.
  if (keyframe || fragment_start_ms_ < 0 || pts_ms - fragment_start_ms_ >= settings_.keyframe_every.count())
    fragment_start_ms_ = pts_ms;
  return Drain(duration_ms);
}

std::expected<void, EncoderError> SegmentEncoder::Drain(int64_t duration_ms) {
  Av& av = *av_;
  for (;;) {
    int e = avcodec_receive_packet(av.codec, av.packet);
    if (e == AVERROR(EAGAIN) || e == AVERROR_EOF) break;
    if (e < 0) return Fail("encoding a frame", e);
    if (duration_ms > 0) av.packet->duration = duration_ms;
    av_packet_rescale_ts(av.packet, av.codec->time_base, av.stream->time_base);
    av.packet->stream_index = av.stream->index;
    e = av_write_frame(av.format, av.packet);
    av_packet_unref(av.packet);
    if (e < 0) return Fail("writing the segment", e);
    // A frame that started a fragment ended the one before it: put that on disk now.
    avio_flush(av.format->pb);
    if (av.format->pb->error < 0) return Fail("writing the segment", av.format->pb->error);
  }
  return {};
}

std::expected<SegmentStats, EncoderError> SegmentEncoder::Finish(int64_t end_ms) {
  if (finished_) return Fail("the segment is finished");
  finished_ = true;
  Av& av = *av_;
  // The last picture lasts until the segment's end: code it once more 1 ms before it, lasting
  // 1 ms, so that the file ends exactly at end_ms (the muxer would give it the duration of the
  // frame before, and the file would run past end_ms). A joined recording then starts each
  // segment at the sum of the earlier segments' end - start, the figure the API lists.
  if (stats_.frames > 0 && end_ms - 1 > stats_.last_pts_ms) {
    if (auto r = Repeat(end_ms - 1, 1); !r) return std::unexpected(r.error());
  }
  if (int e = avcodec_send_frame(av.codec, nullptr); e < 0) return Fail("flushing the encoder", e);
  if (auto r = Drain(); !r) return std::unexpected(r.error());
  if (int e = av_write_trailer(av.format); e < 0) return Fail("mp4 trailer", e);
  stats_.bytes = static_cast<uint64_t>(avio_size(av.format->pb));
  if (int e = avio_closep(&av.format->pb); e < 0) return Fail("closing the segment", e);
  return stats_;
}

}  // namespace deskbox::recorder
