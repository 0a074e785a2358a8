# find_package(torch_mp): the imported target torch_mp::torch_mp, linked to the Torch it was built against (found
# here through find_package(Torch); give CMAKE_PREFIX_PATH both prefixes).
include(CMakeFindDependencyMacro)
find_dependency(Torch)
include("${CMAKE_CURRENT_LIST_DIR}/torch_mpTargets.cmake")
