// ferry-consume: read a job from workers or a dispatcher and report throughput (see
// consume.h). A wrong flag prints usage and exits 2.
#include <CLI/CLI.hpp>
#include <iostream>

#include "consume.h"

int main(int argc, char** argv) {
  CLI::App app("ferry-consume: read a Ferry job and report what arrived", "ferry-consume");
  ferry::tools::ConsumeArgs args;
  ferry::tools::AddConsumeOptions(&app, &args);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    std::cerr << "ferry-consume: " << e.what() << "\n\n" << app.help();
    return 2;
  }
  return ferry::tools::RunConsumeCommand(app, args);
}
