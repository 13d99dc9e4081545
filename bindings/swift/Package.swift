// swift-tools-version: 5.9
// The Swift binding of libmcphost. Build the library first
// (`cargo build --release -p mcphost-c` at the repository root) and tell
// the linker where it is: README.md says how.
import PackageDescription

let package = Package(
    name: "MCPHost",
    platforms: [.macOS(.v13), .iOS(.v16)],
    products: [
        .library(name: "MCPHost", targets: ["MCPHost"]),
    ],
    targets: [
        // include/mcphost.h through a module map; links -lmcphost. The
        // optional pkg-config file (README.md) gives the linker its path.
        .systemLibrary(name: "CMCPHost", path: "Sources/CMCPHost", pkgConfig: "mcphost"),
        .target(name: "MCPHost", dependencies: ["CMCPHost"], path: "Sources/MCPHost"),
        .testTarget(name: "MCPHostTests", dependencies: ["MCPHost"], path: "Tests/MCPHostTests"),
    ]
)
