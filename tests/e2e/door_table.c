/* door_table.c — prints the door's table (shim/door/table.h), one symbol a line with what stands
 * in front of it: "ours" (an entry point of libgpupool, which must be exported) or "own" (the
 * shim only calls it), for check_exports.sh to hold the library's exports and the driver's own
 * symbols against. Prints nothing else. */
#include <stdio.h>

#include "table.h"

#define DRIVER_OURS(cls, name, base, version, flavour, params, args, stream)                       \
	puts("cu" #name " ours");
#define DRIVER_OWN(cls, name, base, version, flavour, params, args, stream) puts("cu" #name " own");
#define RUNTIME_OURS(name, params) puts("cuda" #name " ours");
#define RUNTIME_OWN(name, params) puts("cuda" #name " own");

int main(void)
{
	GP_DRIVER_OURS(DRIVER_OURS)
	GP_DRIVER_OWN(DRIVER_OWN)
	GP_RUNTIME_DOOR(RUNTIME_OURS)
	GP_RUNTIME_OWN(RUNTIME_OWN)
	return 0;
}
