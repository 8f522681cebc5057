//! A tar archive (POSIX ustar) of a few files in one folder: how the page
//! downloads a trace per rank in one file, as torchrun's ranks leave them
//! in one folder (`tar xf` it, then `stepscope open` or HTA the folder's
//! files).

const BLOCK: usize = 512;

/// The archive of `files` (name, bytes) inside the folder `folder`. Names
/// must be ASCII and folder/name at most 100 bytes (the page's are short);
/// `mtime_s` is the files' time, seconds since 1970.
pub fn tar(folder: &str, files: &[(String, Vec<u8>)], mtime_s: u64) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend(header(&format!("{folder}/"), 0, b'5', 0o755, mtime_s));
    for (name, bytes) in files {
        out.extend(header(&format!("{folder}/{name}"), bytes.len(), b'0', 0o644, mtime_s));
        out.extend_from_slice(bytes);
        out.resize(out.len().next_multiple_of(BLOCK), 0);
    }
    // The end: two zero blocks.
    out.resize(out.len() + 2 * BLOCK, 0);
    out
}

/// One entry's header block.
fn header(name: &str, size: usize, kind: u8, mode: u32, mtime_s: u64) -> [u8; BLOCK] {
    assert!(name.is_ascii() && name.len() <= 100, "a tar name the page chose: {name}");
    let mut h = [0u8; BLOCK];
    let mut put = |at: usize, field: &[u8]| h[at..at + field.len()].copy_from_slice(field);
    put(0, name.as_bytes());
    put(100, format!("{mode:07o}\0").as_bytes());
    put(108, b"0000000\0");
    put(116, b"0000000\0");
    put(124, format!("{size:011o}\0").as_bytes());
    put(136, format!("{mtime_s:011o}\0").as_bytes());
    put(148, b"        ");
    put(156, &[kind]);
    put(257, b"ustar\0");
    put(263, b"00");
    put(265, b"stepscope");
    put(297, b"stepscope");
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each header's checksum holds, each file lies where its header says,
    /// padded to the block, and the archive ends with two zero blocks; the
    /// system's tar (where there is one) lists and extracts it.
    #[test]
    fn an_archive_reads_back() {
        let files =
            vec![("rank0.json".to_string(), b"{\"a\": 1}".to_vec()), ("rank1.json".to_string(), vec![b'x'; 513])];
        let t = tar("run", &files, 1_700_000_000);
        assert_eq!(t.len() % BLOCK, 0);
        let octal = |b: &[u8]| {
            let s = std::str::from_utf8(b).unwrap().trim_end_matches(['\0', ' ']);
            usize::from_str_radix(s, 8).unwrap()
        };
        let mut at = 0;
        let mut seen = Vec::new();
        while t[at..at + BLOCK].iter().any(|&b| b != 0) {
            let h = &t[at..at + BLOCK];
            let mut blank = h.to_vec();
            blank[148..156].copy_from_slice(b"        ");
            assert_eq!(octal(&h[148..154]), blank.iter().map(|&b| b as usize).sum::<usize>());
            let name = std::str::from_utf8(&h[..100]).unwrap().trim_end_matches('\0').to_string();
            let size = octal(&h[124..136]);
            seen.push((name, t[at + BLOCK..at + BLOCK + size].to_vec()));
            at += BLOCK + size.next_multiple_of(BLOCK);
        }
        assert_eq!(&t[at..], &[0u8; 2 * BLOCK][..]);
        assert_eq!(seen[0], ("run/".to_string(), Vec::new()));
        assert_eq!(
            seen[1..],
            [("run/rank0.json".to_string(), files[0].1.clone()), ("run/rank1.json".to_string(), files[1].1.clone())]
        );
        let dir = std::env::temp_dir().join(format!("stepscope-tar-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("t.tar"), &t).unwrap();
        if let Ok(out) = std::process::Command::new("tar").arg("xf").arg("t.tar").current_dir(&dir).output() {
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            assert_eq!(std::fs::read(dir.join("run/rank1.json")).unwrap(), files[1].1);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
