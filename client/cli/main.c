/*
 * main — the tracectl executable. Everything else of the CLI is in the
 * tracectl_cli_core library (CMakeLists.txt), which the unit tests link too.
 */
#include "cli.h"

int main(int argc, char **argv)
{
    return cli_main(argc, argv);
}
