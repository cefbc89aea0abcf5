// SPEC §12: the verify of a token tree (VerifyParams::parent), kernels/verify.cu's kernel with kTree, in
// a unit of its own. It keeps branch states in the thread's local memory by design ([TAG_TREE]), which
// verify.cu's ptxas check (-warn-lmem-usage, kernels/CMakeLists.txt) refuses for the chain kernels.
#define KDAGRAPH_VERIFY_TREE_UNIT 1
#include "kernels/verify.cu"
