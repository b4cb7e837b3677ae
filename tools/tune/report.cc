// `kjit tune --report` and `kjit tune report`: the sweep as a table, and a PNG chart through
// gnuplot (see tuner.hpp).
#include "tools/tune/tuner.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <unistd.h>

namespace kjit::tune {

std::string report_table(const SweepResult& r) {
  std::string out = fmt::format("kjit tune {} on {} (fingerprint {}): {} compiled, {} failed, {} skipped (failed "
                                "before) in {:.1f} s; measured in {:.1f} s{}\n",
                                r.op, r.device, r.fingerprint_id, r.compiled, r.compile_failed, r.compile_skipped,
                                r.compile_s, r.measure_s,
                                r.screen_samples > 0 ? fmt::format(" (screened with {} graph samples, margin {:.0f}%)",
                                                                   r.screen_samples, r.screen_margin * 100)
                                                     : std::string());
  for (const ShapeResult& s : r.shapes) {
    out += fmt::format("\n{}  bucket [{}]{}\n", shape_text(s.shape), fmt::join(s.bucket, ","),
                       s.tunable ? "" : " (not tunable)");
    const double def_us = s.candidates.empty() ? 0 : s.candidates[0].us;
    out += fmt::format("  {:>3} {:<14} {:>10} {:>10} {:>7} {:>8}  {}\n", "#", "status", "graph µs", "eager µs", "spread",
                       "vs dflt", "candidate");
    for (const Measurement& m : s.candidates) {
      const char* mark = m.index == s.winner ? " <- winner" : m.index == s.runner_up ? " <- runner-up" : "";
      const bool timed = m.status == "ok" || m.status == "dropped";
      const std::string vs = timed && def_us > 0 ? fmt::format("{:+.1f}%", (m.us / def_us - 1) * 100) : "";
      out += fmt::format("  {:>3} {:<14} {:>10.2f} {:>10.2f} {:>6.1f}% {:>8}  {}{}\n", m.index, m.status, m.us,
                         m.eager_us, m.spread * 100, vs, m.label, mark);
      if (m.status != "ok" && !m.why.empty()) {
        std::string why = m.why.substr(0, m.why.find('\n'));
        if (why.size() > 160) why = why.substr(0, 160) + "...";
        out += fmt::format("      {}\n", why);
      }
    }
    if (s.winner < 0) {
      out += "  no winner: the default plan did not measure ok\n";
    } else {
      out += fmt::format("  winner {} ({}): {:.1f}% faster than the default, runner-up {:.1f}% behind\n", s.winner,
                         s.winner == 0 ? "the default" : "tuned", s.gain * 100, s.margin * 100);
    }
  }
  return out;
}

std::string write_chart(const SweepResult& r, const std::string& png_path) {
  if (std::system("command -v gnuplot > /dev/null 2>&1") != 0) {
    return "gnuplot is not installed (Debian/Ubuntu: apt-get install gnuplot-nox); the table above has the same "
           "numbers, and `kjit tune report FILE.json --png OUT.png` draws the chart on a machine that has it";
  }
  char data_path[] = "/tmp/kjit-tune-chart-XXXXXX";
  const int fd = ::mkstemp(data_path);
  if (fd < 0) return "cannot create a temp file for the chart data";
  ::close(fd);
  {
    std::ofstream data(data_path);
    // One block per shape: candidate index, time relative to the default, winner flag.
    for (size_t s = 0; s < r.shapes.size(); ++s) {
      const ShapeResult& sr = r.shapes[s];
      const double def_us = sr.candidates.empty() ? 0 : sr.candidates[0].us;
      for (const Measurement& m : sr.candidates) {
        if ((m.status != "ok" && m.status != "dropped") || def_us <= 0) continue;
        data << s << ' ' << m.index << ' ' << m.us / def_us << ' ' << (m.index == sr.winner ? 1 : 0) << '\n';
      }
    }
  }
  std::string labels;
  for (size_t s = 0; s < r.shapes.size(); ++s) {
    labels += fmt::format("{}\"{}\" {}", s == 0 ? "" : ", ", shape_text(r.shapes[s].shape), s);
  }
  const std::string script = fmt::format(
      "set terminal pngcairo size 1400,{} noenhanced\n"
      "set output '{}'\n"
      "set title 'kjit tune {} on {}: time per candidate relative to the default plan (winner: red)'\n"
      "set xlabel 'time / default time (lower is faster)'\n"
      "set ytics ({})\n"
      "set yrange [-0.6:{} - 0.4]\n"
      "set grid xtics\n"
      "set key off\n"
      "set arrow from 1, graph 0 to 1, graph 1 nohead dt 2\n"
      "plot '{}' using 3:($1 + 0.6 * ($2 / {} - 0.5)) with points pt 7 ps 0.6 lc rgb '#4477aa', "
      "'' using ($4 > 0 ? $3 : 1/0):($1 + 0.6 * ($2 / {} - 0.5)) with points pt 7 ps 1.6 lc rgb '#cc2222'\n",
      300 + 40 * r.shapes.size(), png_path, r.op, r.device, labels, r.shapes.size(), data_path, 200, 200);
  FILE* p = ::popen("gnuplot 2>&1", "w");
  if (p == nullptr) {
    std::remove(data_path);
    return "cannot run gnuplot";
  }
  std::fwrite(script.data(), 1, script.size(), p);
  const int status = ::pclose(p);
  std::remove(data_path);
  if (status != 0) return fmt::format("gnuplot failed (status {}) writing {}", status, png_path);
  return {};
}

}  // namespace kjit::tune
