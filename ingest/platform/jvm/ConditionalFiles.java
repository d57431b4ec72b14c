package ingest.delta;

import java.io.ByteArrayOutputStream;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.InputStream;
import java.util.Arrays;

import org.apache.hadoop.fs.EtagSource;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * A file created only if absent, and replaced only if unchanged since read (its ETag), through
 * Hadoop's conditional create (S3A: `If-None-Match: *` and `If-Match` on PutObject). The log
 * store's commits and the lease on an object store are made of these.
 *
 * <p>S3A checks the condition when the stream closes and fails the close with a
 * `RemoteFileChangedException` (HTTP 412). A failed close is read back rather than told apart
 * by its class: an SDK retry of a put that had landed meets its own file and fails, so a file
 * whose bytes are this writer's is this writer's success.
 */
public final class ConditionalFiles {

    /** The create option (Hadoop's `Options.CreateFileOptionKeys`). */
    public static final String IF_ABSENT = "fs.option.create.conditional.overwrite";
    public static final String IF_ETAG = "fs.option.create.conditional.overwrite.etag";

    private ConditionalFiles() {
    }

    /** Whether the file system creates `path` only if absent. */
    public static boolean offered(FileSystem fs, Path path) throws IOException {
        return fs.hasPathCapability(path, IF_ABSENT) && fs.hasPathCapability(path, IF_ETAG);
    }

    /** Creates the file if absent: its ETag (or "" where the store has none), null if it existed. */
    public static String createIfAbsent(FileSystem fs, Path path, byte[] content) throws IOException {
        try {
            try (FSDataOutputStream out = openIfAbsent(fs, path)) {
                out.write(content);
            }
        } catch (IOException failed) {
            return settle(fs, path, content, failed);
        }
        return etag(fs, path);
    }

    /** A stream that creates the file when it closes, only if the file is still absent then. */
    public static FSDataOutputStream openIfAbsent(FileSystem fs, Path path) throws IOException {
        return (FSDataOutputStream) fs.createFile(path).overwrite(false).must(IF_ABSENT, true).build();
    }

    /** After a create if absent failed: the file's ETag if it holds `content` (this writer's
     * put landed), null if it holds other bytes (another writer's), `failed` again if none. */
    public static String settle(FileSystem fs, Path path, byte[] content, IOException failed) throws IOException {
        byte[] there = bytes(fs, path);
        if (there == null) {
            throw failed;
        }
        return Arrays.equals(there, content) ? etag(fs, path) : null;
    }

    /** Replaces the file if its ETag is still `expected`: the new ETag, or null if it changed
     * (or is gone). */
    public static String replaceIfMatch(FileSystem fs, Path path, byte[] content, String expected)
            throws IOException {
        try {
            try (FSDataOutputStream out = (FSDataOutputStream) fs.createFile(path).overwrite(true).must(IF_ETAG, expected).build()) {
                out.write(content);
            }
        } catch (IOException failed) {
            String now = etagOrNull(fs, path);
            if (now != null && now.equals(expected)) {
                throw failed;  // unchanged: not the condition that failed
            }
            byte[] there = now == null ? null : bytes(fs, path);
            return there != null && Arrays.equals(there, content) ? now : null;
        }
        return etag(fs, path);
    }

    /** The file's text and ETag, or null when there is no file. */
    public static String[] read(FileSystem fs, Path path) throws IOException {
        String tag = etagOrNull(fs, path);
        byte[] content = tag == null ? null : bytes(fs, path);
        if (content == null) {
            return null;
        }
        return new String[] {new String(content, java.nio.charset.StandardCharsets.UTF_8), tag};
    }

    private static String etag(FileSystem fs, Path path) throws IOException {
        String tag = etagOrNull(fs, path);
        return tag == null ? "" : tag;
    }

    private static String etagOrNull(FileSystem fs, Path path) throws IOException {
        FileStatus status;
        try {
            status = fs.getFileStatus(path);
        } catch (FileNotFoundException gone) {
            return null;
        }
        return status instanceof EtagSource ? ((EtagSource) status).getEtag() : "";
    }

    private static byte[] bytes(FileSystem fs, Path path) throws IOException {
        try (InputStream in = fs.open(path)) {
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            in.transferTo(out);
            return out.toByteArray();
        } catch (FileNotFoundException gone) {
            return null;
        }
    }
}
