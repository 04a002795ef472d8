// Starts an embedded HiveMQ Community Edition broker and runs until SIGTERM.
//
// Written by mqbench (mqbench/brokers/specs/hivemq.py); run as a single-file source program:
//   java -cp '<hivemq jars>/*' HiveMQLauncher.java <config dir> <data dir> <extensions dir>
// The config directory holds HiveMQ's config.xml. Prints
// "mqbench-launcher ready broker=hivemq version=<v>" once the broker has started, exits 1
// with the cause when it cannot start, and stops the broker on SIGTERM/SIGINT.

import com.hivemq.embedded.EmbeddedHiveMQ;
import java.nio.file.Path;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

public class HiveMQLauncher {
    public static void main(String[] args) throws Exception {
        if (args.length != 3) {
            System.err.println("usage: HiveMQLauncher <config dir> <data dir> <extensions dir>");
            System.exit(2);
        }
        EmbeddedHiveMQ hivemq = EmbeddedHiveMQ.builder()
                .withConfigurationFolder(Path.of(args[0]))
                .withDataFolder(Path.of(args[1]))
                .withExtensionsFolder(Path.of(args[2]))
                .build();
        CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                hivemq.stop().get(10, TimeUnit.SECONDS);
            } catch (Exception e) {
                System.err.println("mqbench-launcher: stop failed: " + e);
            }
            stopped.countDown();
        }, "mqbench-shutdown"));
        try {
            hivemq.start().join();
        } catch (Exception e) {
            System.err.println("mqbench-launcher: hivemq failed to start: " + e);
            e.printStackTrace();
            System.exit(1);
        }
        String version = EmbeddedHiveMQ.class.getPackage().getImplementationVersion();
        System.out.println("mqbench-launcher ready broker=hivemq version="
                + (version == null ? "unknown" : version));
        System.out.flush();
        stopped.await();
    }
}
