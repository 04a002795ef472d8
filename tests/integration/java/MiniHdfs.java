import java.io.File;
import java.nio.file.Files;
import java.nio.file.Paths;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.MiniDFSCluster;

/**
 * A MiniDFSCluster (one name node, one data node) on 127.0.0.1 for mqbench's tests.
 *
 * <p>Arguments: the base directory and a file to write the name node's URI into once the
 * cluster is up. It runs until the process is stopped (the test fixture stops it by PID).
 */
public final class MiniHdfs {
    private MiniHdfs() {}

    public static void main(String[] args) throws Exception {
        File base = new File(args[0]);
        Configuration conf = new Configuration();
        conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, base.getAbsolutePath());
        conf.set("dfs.namenode.rpc-bind-host", "127.0.0.1");
        conf.set("dfs.datanode.address", "127.0.0.1:0");
        conf.set("dfs.datanode.http.address", "127.0.0.1:0");
        conf.set("dfs.datanode.ipc.address", "127.0.0.1:0");
        conf.set("dfs.namenode.http-address", "127.0.0.1:0");
        conf.setBoolean("dfs.permissions.enabled", false);
        MiniDFSCluster cluster = new MiniDFSCluster.Builder(conf)
                .numDataNodes(1)
                .nameNodePort(0)
                .nameNodeHttpPort(0)
                .build();
        cluster.waitActive();
        String uri = "hdfs://127.0.0.1:" + cluster.getNameNodePort();
        Files.writeString(Paths.get(args[1] + ".tmp"), uri);
        Files.move(Paths.get(args[1] + ".tmp"), Paths.get(args[1]));
        Runtime.getRuntime().addShutdownHook(new Thread(cluster::shutdown));
        Thread.currentThread().join();
    }
}
